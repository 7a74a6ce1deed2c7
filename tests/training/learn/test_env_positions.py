"""The retrieval MDP (rewards, termination, masking) and relative positions / RoPE, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from qrag.training.data.episode import Episode
from qrag.training.learn.config import EnvConfig
from qrag.training.learn.env import RetrievalEnv, completion_reward
from qrag.training.model.positions import relative_positions, rotary_scores, rotate_halves

EP = Episode("where is the milk?", ["a", "b", "c", "d", "e", "f"], (1, 4), "x", "ep")


def play(config: EnvConfig, actions: list[int]) -> tuple[list[float], list[bool], list[bool]]:
    env = RetrievalEnv([EP], config, num_envs=1, auto_reset=False)
    rewards, term, trunc = [], [], []
    for a in actions:
        r = env.step([a])
        rewards.append(r.rewards.item())
        term.append(bool(r.terminated.item()))
        trunc.append(bool(r.truncated.item()))
    return rewards, term, trunc


def test_completion_reward_examples_from_the_method() -> None:
    assert completion_reward(2, 2, True) == pytest.approx(1.0)
    assert completion_reward(2, 3, True) == pytest.approx(0.8333333)
    assert completion_reward(2, 6, True) == pytest.approx(0.6666667)
    assert completion_reward(2, 6, False) == 1.0


def test_reward_paid_once_at_completion_and_terminates() -> None:
    rewards, term, trunc = play(EnvConfig(max_hops=6), [0, 1, 4])
    assert rewards == pytest.approx([0.0, 0.0, 0.5 + 0.5 * 2 / 3])
    assert term == [False, False, True] and trunc == [False, False, False]


def test_never_terminate_pays_nothing_after_completion_and_truncates_at_max_hops() -> None:
    rewards, term, trunc = play(EnvConfig(max_hops=4, never_terminate=True), [1, 4, 0, 2])
    assert rewards == pytest.approx([0.0, 1.0, 0.0, 0.0])
    assert term == [False] * 4 and trunc == [False, False, False, True]


def test_truncation_at_horizon_without_success() -> None:
    rewards, term, trunc = play(EnvConfig(max_hops=2, penalize_extra_steps=False), [0, 2])
    assert rewards == [0.0, 0.0] and trunc == [False, True] and term == [False, False]


def test_selected_chunk_cannot_be_taken_again() -> None:
    env = RetrievalEnv([EP], EnvConfig(), num_envs=1, auto_reset=False)
    env.step([3])
    selected, valid = env.masks()
    assert selected[0].tolist() == [False, False, False, True, False, False]
    with pytest.raises(ValueError, match="not an available chunk"):
        env.step([3])


def test_auto_reset_and_state_order() -> None:
    order = iter([0, 0, 0])
    env = RetrievalEnv([EP], EnvConfig(max_hops=2), 1, sampler=lambda: next(order), state_order="document")
    env.step([4])
    env.step([1])  # completes: the slot restarts with a fresh episode
    assert env.slot(0).selected == []
    env2 = RetrievalEnv([EP], EnvConfig(max_hops=3), 1, auto_reset=False, state_order="document")
    env2.step([4])
    env2.step([0])
    assert env2.state_texts()[1] == [["a", "e"]]
    env2.state_order = "selection"
    assert env2.state_texts()[1] == [["e", "a"]]


def test_env_state_round_trip() -> None:
    env = RetrievalEnv([EP, EP], EnvConfig(max_hops=3), 2, sampler=lambda: 1)
    env.step([2, 3])
    other = RetrievalEnv([EP, EP], EnvConfig(max_hops=3), 2, sampler=lambda: 0)
    other.load_state_dict(env.state_dict())
    assert [s.selected for s in other.slots] == [[2], [3]]  # type: ignore[union-attr]
    assert [s.episode_index for s in other.slots] == [1, 1]  # type: ignore[union-attr]


def test_episode_without_supporting_rejected() -> None:
    with pytest.raises(ValueError, match="no supporting"):
        RetrievalEnv([Episode("q", ["a"], ())], EnvConfig(), 1)


def slow_relative_positions(selected: list[bool]) -> list[float]:
    out, gap, gap_members = [0.0] * len(selected), 0, {}
    for i, s in enumerate(selected):
        if s:
            gap += 1
        else:
            gap_members.setdefault(gap, []).append(i)
    for k, members in gap_members.items():
        L = len(members)
        for j, i in enumerate(members):
            out[i] = 20 * k + (18 * j / (L - 1) if L > 1 else 0.0)
    return out


def test_relative_positions_by_hand() -> None:
    sel = torch.tensor([[False, False, False, True, False, True, False, False]])
    pos = relative_positions(sel)[0]
    # gap 0 = chunks 0,1,2 → 0, 9, 18; gap 1 = chunk 4 alone → 20; gap 2 = chunks 6,7 → 40, 58
    avail = ~sel[0]
    assert pos[avail].tolist() == pytest.approx([0.0, 9.0, 18.0, 20.0, 40.0, 58.0])


def test_relative_positions_match_loop_and_respect_padding() -> None:
    gen = torch.Generator().manual_seed(0)
    sel = torch.rand(6, 50, generator=gen) < 0.1
    pos = relative_positions(sel)
    for b in range(6):
        expected = torch.tensor(slow_relative_positions(sel[b].tolist()))
        assert torch.allclose(pos[b][~sel[b]], expected[~sel[b]])
    valid = torch.ones(1, 5, dtype=torch.bool)
    valid[0, 3:] = False
    pos = relative_positions(torch.zeros(1, 5, dtype=torch.bool), valid)
    assert pos[0, :3].tolist() == pytest.approx([0.0, 9.0, 18.0])  # padding is not part of the gap


def test_positions_bounded_whatever_n() -> None:
    sel = torch.zeros(1, 400_000, dtype=torch.bool)
    sel[0, [10, 123_456, 399_000]] = True
    assert relative_positions(sel).max().item() <= 20 * 4


def test_rope_is_a_rotation_per_half() -> None:
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(3, 16, generator=gen)
    p = torch.tensor([0.0, 7.5, 123.25])
    r = rotate_halves(v, p)
    assert torch.allclose(r[0], v[0])  # position 0 is the identity
    assert torch.allclose(r[:, :8].norm(dim=-1), v[:, :8].norm(dim=-1), atol=1e-5)  # each half keeps its norm
    assert torch.allclose(r[:, 8:].norm(dim=-1), v[:, 8:].norm(dim=-1), atol=1e-5)
    # Within a half (H=8), dim m pairs with m+4 and turns by p·θ_m, θ_m = 10000^(−2m/8).
    m, pos = 1, 7.5
    theta = pos * 10000 ** (-2 * m / 8)
    x1, x2 = v[1, m], v[1, m + 4]
    assert r[1, m].item() == pytest.approx((x1 * math.cos(theta) - x2 * math.sin(theta)).item(), abs=1e-5)
    assert r[1, m + 4].item() == pytest.approx((x1 * math.sin(theta) + x2 * math.cos(theta)).item(), abs=1e-5)
    # the second half turns by the same angles
    y1, y2 = v[1, 8 + m], v[1, 8 + m + 4]
    assert r[1, 8 + m].item() == pytest.approx((y1 * math.cos(theta) - y2 * math.sin(theta)).item(), abs=1e-5)


def test_rope_float_positions_not_truncated() -> None:
    v = torch.ones(1, 8)
    assert not torch.allclose(rotate_halves(v, torch.tensor([2.5])), rotate_halves(v, torch.tensor([2.0])))


def test_rotary_scores_by_hand() -> None:
    # D = 4: two heads of one (x1, x2) pair each, θ_0 = 1, so each head scores
    # cos(p)·(s1·x1 + s2·x2) + sin(p)·(s2·x1 − s1·x2).
    s = torch.tensor([[1.0, 2.0, -1.0, 0.5]])
    x = torch.tensor([[3.0, -1.0, 2.0, 4.0], [0.5, 0.5, -2.0, 1.0]])
    p = torch.tensor([[0.7, 21.3]])

    def head(s1: float, s2: float, x1: float, x2: float, pos: float) -> float:
        return math.cos(pos) * (s1 * x1 + s2 * x2) + math.sin(pos) * (s2 * x1 - s1 * x2)

    want = [[head(1, 2, 3, -1, 0.7), head(-1, 0.5, 2, 4, 0.7)], [head(1, 2, 0.5, 0.5, 21.3), head(-1, 0.5, -2, 1, 21.3)]]
    got = rotary_scores(s, x, p, heads=True)  # (2, 1, 2)
    for n in range(2):
        for h in range(2):
            assert got[h, 0, n].item() == pytest.approx(want[n][h], abs=1e-5)
    assert torch.allclose(rotary_scores(s, x, p), got.sum(dim=0))


@pytest.mark.parametrize("shared", [True, False])
def test_rotary_scores_equal_rotating_then_inner_products_with_gradients(shared: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    states = torch.randn(3, 32, generator=gen, requires_grad=True)
    chunks = torch.randn(*(() if shared else (3,)), 11, 32, generator=gen).requires_grad_(True)
    selected = torch.zeros(3, 11, dtype=torch.bool)
    selected[0, 4], selected[1, [2, 9]] = True, True
    positions = relative_positions(selected)  # (3, 11)
    want = torch.einsum("bd,bnd->bn", states, rotate_halves(chunks, positions).expand(3, -1, -1))
    got = rotary_scores(states, chunks, positions)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for a, b in zip(torch.autograd.grad(got.sum(), (states, chunks)), torch.autograd.grad(want.sum(), (states, chunks)),
                    strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    per_head = rotary_scores(states, chunks, positions, heads=True)  # (2, 3, 11)
    rotated = rotate_halves(chunks, positions).expand(3, -1, -1)
    torch.testing.assert_close(per_head[0], torch.einsum("bd,bnd->bn", states[:, :16], rotated[..., :16]), atol=1e-5, rtol=1e-5)



@pytest.mark.parametrize("shared", [True, False])
def test_the_fused_form_is_the_rotated_inner_product(shared: bool) -> None:
    """`fused_rotary_scores` (what torch.compile fuses into one pass) against rotating then inner products, eagerly:
    both heads, a shared corpus and one corpus per state, relative positions with several gaps."""
    from qrag.training.model.positions import fused_rotary_scores, rope_frequencies

    gen = torch.Generator().manual_seed(2)
    states = torch.randn(3, 32, generator=gen)
    chunks = torch.randn(*(() if shared else (3,)), 40, 32, generator=gen)
    selected = torch.zeros(3, 40, dtype=torch.bool)
    selected[0, 7], selected[1, [3, 30]], selected[2, [0, 12, 39]] = True, True, True
    positions = relative_positions(selected)  # (3, 40)
    rotated = rotate_halves(chunks, positions).expand(3, -1, -1)  # (3, 40, 32)
    got = fused_rotary_scores(states, chunks, positions, rope_frequencies(16))  # (2, 3, 40)
    for h, part in enumerate((slice(0, 16), slice(16, 32))):
        torch.testing.assert_close(got[h], torch.einsum("bd,bnd->bn", states[:, part], rotated[..., part]),
                                   atol=1e-5, rtol=1e-5)


def test_a_failing_compiled_pass_falls_back_to_the_eager_form_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.training.model import positions

    def broken(*args: object) -> torch.Tensor:
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(positions, "FUSED_MIN_CHUNKS", 4)
    monkeypatch.setattr(positions, "_FUSED", {"kernel": broken})
    gen = torch.Generator().manual_seed(3)
    states, chunks = torch.randn(2, 16, generator=gen), torch.randn(9, 16, generator=gen)
    pos = relative_positions(torch.zeros(2, 9, dtype=torch.bool))
    with pytest.warns(RuntimeWarning, match="its compiled pass failed \\(RuntimeError: no compiler here\\)"):
        got = rotary_scores(states, chunks, pos)
    torch.testing.assert_close(got, positions._eager_rotary_scores(states, chunks, pos, False))
    assert not positions.fused_scoring(9)  # off for the rest of the process: no second warning
    monkeypatch.setattr(positions, "_FUSED", {})
    monkeypatch.setenv("QRAG_FUSED_SCORES", "0")
    assert not positions.fused_scoring(9) and positions._fused_kernel() is None


def test_eager_scoring_serves_the_eager_form_and_puts_the_compiled_pass_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.training.model import positions

    def kernel(*args: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the compiled pass ran inside eager_scoring")

    monkeypatch.setattr(positions, "FUSED_MIN_CHUNKS", 8)
    monkeypatch.setattr(positions, "_FUSED", {"kernel": kernel})
    monkeypatch.delenv("QRAG_FUSED_SCORES", raising=False)
    states, chunks = torch.randn(2, 8), torch.randn(9, 8)
    pos = relative_positions(torch.zeros(2, 9, dtype=torch.bool))
    with positions.eager_scoring():
        assert not positions.fused_scoring(9)
        with torch.no_grad():
            got = rotary_scores(states, chunks, pos)
    torch.testing.assert_close(got, positions._eager_rotary_scores(states, chunks, pos, False))
    assert positions._FUSED == {"kernel": kernel} and positions.fused_scoring(9)


@pytest.mark.slow
def test_the_compiled_pass_gives_the_eager_q_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile of the fused form (a C++/OpenMP loop on this CPU) against the eager form, within float
    rounding: shared and per-state corpora, both heads, several gaps (compiles once, about 20 s)."""
    from qrag.training.model import positions

    monkeypatch.setattr(positions, "FUSED_MIN_CHUNKS", 64)
    monkeypatch.setattr(positions, "_FUSED", {})
    gen = torch.Generator().manual_seed(4)
    for shape in ((300, 384), (2, 300, 384)):
        states, chunks = torch.randn(2, 384, generator=gen), torch.randn(*shape, generator=gen)
        selected = torch.zeros(2, 300, dtype=torch.bool)
        selected[0, 100], selected[1, [5, 200, 299]] = True, True
        pos = relative_positions(selected)
        with torch.no_grad():
            fused = rotary_scores(states, chunks, pos, heads=True)
        assert "kernel" in positions._FUSED  # the compiled pass served
        torch.testing.assert_close(fused, positions._eager_rotary_scores(states, chunks, pos, True), atol=1e-4, rtol=1e-5)


def test_relative_positions_with_the_number_of_gaps_given_are_the_same() -> None:
    selected = torch.zeros(3, 12, dtype=torch.bool)
    selected[0, 5], selected[1, [0, 11]], selected[2, [2, 3, 8]] = True, True, True
    valid = torch.ones(3, 12, dtype=torch.bool)
    valid[1, 10:] = False
    want = relative_positions(selected, valid)
    assert torch.equal(relative_positions(selected, valid, num_gaps=4), want)  # every row's selected + 1, at most
    assert torch.equal(relative_positions(selected, valid, num_gaps=7), want)  # a looser bound changes nothing


def test_gap_sizes_by_one_hot_sum_and_by_scatter_agree() -> None:
    from qrag.training.model.positions import gap_sizes

    gap = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 1, 1, 1]])
    avail = torch.tensor([[1, 1, 0, 1, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    want = torch.tensor([[2, 1, 3], [0, 5, 0]])
    assert torch.equal(gap_sizes(gap, avail, 3, one_hot=True), want)
    assert torch.equal(gap_sizes(gap, avail, 3, one_hot=False), want)
