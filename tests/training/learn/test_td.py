"""The soft Q(λ) math against hand-computed episodes and a plain loop (METHOD.md §3)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from qrag.training.learn import td


def loop_lambda_returns(rewards, dones, next_values, gamma, lam):  # type: ignore[no-untyped-def]
    """The recursion of METHOD.md §3.4 written with Python floats, one environment at a time."""
    T, E = len(rewards), len(rewards[0])
    out = [[0.0] * E for _ in range(T)]
    for e in range(E):
        g = rewards[T - 1][e] + gamma * (1 - dones[T - 1][e]) * next_values[T - 1][e]
        out[T - 1][e] = g
        for t in range(T - 2, -1, -1):
            g = rewards[t][e] + gamma * (1 - dones[t][e]) * ((1 - lam) * next_values[t][e] + lam * g)
            out[t][e] = g
    return out


# A 3-step episode: rewards 0, 0, 1 (completion at the third step), V(s1)=0.4, V(s2)=0.7, V(s3)=5 (ignored: done).
R = torch.tensor([[0.0], [0.0], [1.0]])
D = torch.tensor([[0.0], [0.0], [1.0]])
V = torch.tensor([[0.4], [0.7], [5.0]])


def test_lambda_zero_is_one_step_td() -> None:
    g = td.lambda_returns(R, D, V, gamma=0.9, lam=0.0).flatten().tolist()
    assert g == pytest.approx([0.9 * 0.4, 0.9 * 0.7, 1.0])


def test_lambda_one_is_monte_carlo() -> None:
    g = td.lambda_returns(R, D, V, gamma=0.9, lam=1.0).flatten().tolist()
    assert g == pytest.approx([0.81, 0.9, 1.0])


def test_intermediate_lambda_by_hand() -> None:
    # G2 = 1; G1 = 0 + .9(.5·.7 + .5·1) = .765; G0 = .9(.5·.4 + .5·.765) = .52425
    g = td.lambda_returns(R, D, V, gamma=0.9, lam=0.5).flatten().tolist()
    assert g == pytest.approx([0.52425, 0.765, 1.0])


def test_episode_boundary_cuts_the_recursion() -> None:
    # Two episodes in one segment: step 1 ends the first (reward 1), steps 2-3 belong to the next.
    r = torch.tensor([[0.0], [1.0], [0.0], [0.0]])
    d = torch.tensor([[0.0], [1.0], [0.0], [0.0]])
    v = torch.tensor([[0.5], [100.0], [0.2], [0.3]])  # V(s2)=100 belongs to the new episode: must not leak
    g = td.lambda_returns(r, d, v, gamma=1.0, lam=1.0).flatten().tolist()
    # segment end bootstraps: G3 = 0 + V(s4)=0.3; G2 = 0 + G3 = 0.3; G1 = 1 (cut); G0 = 0 + G1 = 1
    assert g == pytest.approx([1.0, 1.0, 0.3, 0.3])


def test_last_transition_bootstraps_from_extra_state() -> None:
    g = td.lambda_returns(torch.zeros(1, 2), torch.tensor([[0.0, 1.0]]), torch.tensor([[0.8, 0.8]]), 0.5, 0.7)
    assert g.flatten().tolist() == pytest.approx([0.4, 0.0])


def test_vectorised_equals_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    T, E = 9, 5
    r = (torch.rand(T, E, generator=gen) < 0.2).float() * torch.rand(T, E, generator=gen)
    d = (torch.rand(T, E, generator=gen) < 0.3).float()
    v = torch.rand(T, E, generator=gen)
    for gamma, lam in [(0.99, 0.65), (0.9, 0.0), (1.0, 1.0), (0.5, 0.3)]:
        fast = td.lambda_returns(r, d, v, gamma, lam)
        slow = torch.tensor(loop_lambda_returns(r.tolist(), d.tolist(), v.tolist(), gamma, lam))
        torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)


def test_soft_value_uses_masked_topk_only() -> None:
    q = torch.tensor([[9.0, 1.0, 2.0, 3.0]])
    mask = torch.tensor([[False, True, True, True]])  # the 9 is taken: it must not enter the value
    v = td.soft_value(q, mask, k=2, alpha=0.5)
    assert v.item() == pytest.approx(0.5 * math.log(math.exp(3 / 0.5) + math.exp(2 / 0.5)))


def test_soft_value_with_fewer_available_than_k_and_none() -> None:
    q = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    mask = torch.tensor([[True, False, False], [False, False, False]])
    v = td.soft_value(q, mask, k=5, alpha=1.0)
    assert v.tolist() == pytest.approx([1.0, 0.0])


def test_ensemble_mean_and_min() -> None:
    heads = torch.tensor([[[0.1, 0.4]], [[0.3, 0.2]]])  # (2, B=1, N=2): Q = [0.4, 0.6]
    mask = torch.ones(1, 2, dtype=torch.bool)
    alpha = 0.1
    mean = td.ensemble_soft_value(heads, mask, k=2, alpha=alpha, mode="mean")
    assert mean.item() == pytest.approx(alpha * math.log(math.exp(4.0) + math.exp(6.0)))
    lo = td.ensemble_soft_value(heads, mask, k=2, alpha=alpha, mode="min")
    head1 = alpha * math.log(math.exp(0.2 / alpha) + math.exp(0.8 / alpha))  # 2·Q1 = [0.2, 0.8]
    head2 = alpha * math.log(math.exp(0.6 / alpha) + math.exp(0.4 / alpha))  # 2·Q2 = [0.6, 0.4]
    assert lo.item() == pytest.approx(min(head1, head2))
    assert lo.item() <= mean.item()


def test_masked_chunks_never_chosen() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.tensor([[10.0, 0.0, 0.1, 5.0]]).repeat(200, 1)
    mask = torch.tensor([[False, True, True, False]]).repeat(200, 1)
    for actions in (
        td.boltzmann_actions(q, mask, k=3, alpha=0.01, generator=gen),
        td.boltzmann_actions(q, mask, k=1, alpha=100.0, generator=gen),
        td.uniform_actions(mask, generator=gen),
        td.greedy_actions(q, mask),
    ):
        assert set(actions.tolist()) <= {1, 2}
    assert td.greedy_actions(q, mask).tolist() == [2] * 200


def test_boltzmann_restricted_to_topk_and_follows_softmax() -> None:
    gen = torch.Generator().manual_seed(1)
    q = torch.tensor([[1.0, 0.0, 0.5, -3.0]]).repeat(20000, 1)
    mask = torch.ones_like(q, dtype=torch.bool)
    a = td.boltzmann_actions(q, mask, k=2, alpha=1.0, generator=gen)
    assert set(a.tolist()) == {0, 2}
    p0 = (a == 0).float().mean().item()
    assert p0 == pytest.approx(1 / (1 + math.exp(-0.5)), abs=0.015)


def test_no_available_chunk_is_an_error() -> None:
    with pytest.raises(ValueError, match="no available chunk"):
        td.greedy_actions(torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.bool))


def test_td_loss_by_hand() -> None:
    loss = td.td_loss(torch.tensor([0.25, 0.0]), torch.tensor([0.5, 0.1]), torch.tensor([1.0, 0.0]))
    # head 1: 2q = [0.5, 0] vs [1, 0] → mse .125; head 2: 2q = [1, .2] → mse .02
    assert loss.item() == pytest.approx(0.5 * 0.125 + 0.5 * 0.02)


def test_polyak_moves_only_trainable_parameters() -> None:
    online, target = nn.Linear(2, 2), nn.Linear(2, 2)
    with torch.no_grad():
        online.weight.fill_(1.0)
        online.bias.fill_(1.0)
        target.weight.zero_()
        target.bias.zero_()
    online.bias.requires_grad_(False)
    td.polyak_update(target, online, tau=0.25)
    assert torch.allclose(target.weight, torch.full((2, 2), 0.25))
    assert torch.allclose(target.bias, torch.zeros(2))


def test_lr_schedule_warmup_decay_and_clamp() -> None:
    assert td.lr_factor(0, 4, 0.0, "linear") == pytest.approx(0.25)  # warm-up counts optimiser steps
    assert td.lr_factor(3, 4, 0.0, "linear") == pytest.approx(1.0)
    assert td.lr_factor(7, 4, 0.5, "linear") == pytest.approx(0.5)  # the decay follows the budget's share
    assert td.lr_factor(7, 4, 0.25, "cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert td.lr_factor(50, 4, 1.7, "linear") == 0.0  # clamped, never negative
    assert td.lr_factor(50, 4, 1.0, "cosine") == pytest.approx(0.0, abs=1e-12)
    assert td.lr_factor(7, 0, 0.9, "constant") == 1.0
    assert td.linear_decay(0.1, 0.01, 0.5) == pytest.approx(0.055)
    assert td.linear_decay(0.1, None, 0.5) == 0.1


def test_explore_actions_temperature_and_epsilon_over_the_topk() -> None:
    q = torch.tensor([[1.0, 0.0, 0.9, -3.0, 0.95]]).repeat(20000, 1)
    mask = torch.tensor([[True, True, True, True, False]]).repeat(20000, 1)
    # ε = 1: uniform over the available top-3 {0, 2, 1} whatever the gaps; never the masked 4 or the 4th best.
    a = td.explore_actions(q, mask, k=3, temperature=1e-4, epsilon=1.0, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(a, minlength=5).float() / len(a)
    assert counts[3] == 0 and counts[4] == 0
    assert counts[[0, 1, 2]].tolist() == pytest.approx([1 / 3] * 3, abs=0.015)
    # ε = 0.3 at a near-zero temperature: the best with 0.7 + 0.1, each other top-3 chunk with 0.1.
    a = td.explore_actions(q, mask, k=3, temperature=1e-4, epsilon=0.3, generator=torch.Generator().manual_seed(1))
    assert (a == 0).float().mean().item() == pytest.approx(0.8, abs=0.015)
    # the temperature alone: softmax((Q − max)/T) over the top-2 {0, 2}
    a = td.explore_actions(q, mask, k=2, temperature=0.1, generator=torch.Generator().manual_seed(2))
    assert (a == 2).float().mean().item() == pytest.approx(1 / (1 + math.exp(1.0)), abs=0.015)
    # with ε = 0 and T = α it is Boltzmann acting, draw for draw
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(td.explore_actions(q, mask, 3, 0.5, 0.0, g1), td.boltzmann_actions(q, mask, 3, 0.5, g2))


def test_margin_loss_by_hand() -> None:
    """DQfD's large-margin loss with the remaining gold chunks as the demonstrator (hand-computed)."""
    q = torch.tensor([[0.5, 0.3, 0.45, 9.0],     # gold 1 is 0.2 below the best other (0): 0.5 + 0.1 - 0.3
                      [0.2, 0.9, 0.1, 0.0],      # gold 1 is 0.7 above every other: no loss
                      [0.2, 0.9, 0.1, 0.0],      # no gold left (the episode is complete): nothing to rank
                      [0.2, 0.9, 0.1, 0.0]], requires_grad=True)
    available = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 0, 0]], dtype=torch.bool)
    gold = torch.tensor([[0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]], dtype=torch.bool)
    # row 0: the masked 9.0 is not a competitor; row 3: the gold chunk is the only one left, nothing to rank
    loss = td.margin_loss(q, available, gold, margin=0.1)
    assert loss.item() == pytest.approx(0.3 / 4)  # the batch mean: rows without a constraint count 0
    loss.backward()
    expected = torch.zeros(4, 4)
    expected[0, 0], expected[0, 1] = 0.25, -0.25  # only the best other and the best gold of a violated row move
    assert torch.allclose(q.grad, expected)


def test_margin_loss_takes_the_best_of_several_gold_chunks() -> None:
    q = torch.tensor([[0.6, 0.1, 0.55]])
    available = torch.ones(1, 3, dtype=torch.bool)
    gold = torch.tensor([[True, True, False]])  # either remaining gold fact may be taken next
    assert td.margin_loss(q, available, gold, margin=0.1).item() == pytest.approx(0.05)
    assert td.margin_loss(q, available, gold, margin=0.0).item() == 0.0


def test_margin_loss_over_all_charges_every_chunk_inside_the_margin() -> None:
    q = torch.tensor([[0.5, 0.3, 0.45, 0.1, 9.0]], requires_grad=True)
    available = torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool)
    gold = torch.tensor([[0, 1, 0, 0, 0]], dtype=torch.bool)
    loss = td.margin_loss(q, available, gold, margin=0.1, over="all")
    # 0.5 + 0.1 - 0.3 = 0.3, 0.45 + 0.1 - 0.3 = 0.25, 0.1 + 0.1 - 0.3 < 0: not charged; the masked 9.0 neither
    assert loss.item() == pytest.approx(0.55)
    loss.backward()
    assert q.grad.tolist() == [[1.0, -2.0, 1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="over"):
        td.margin_loss(q, available, gold, 0.1, over="mean")  # type: ignore[arg-type]
