"""The learning math of soft Q(λ), as pure tensor functions (METHOD.md §3).

Shape legend: B batch (states or environments), N chunks, T rollout steps, E environments,
K top-k, D vector dim. Masks are bool, True = the chunk is available (not yet selected, not padding).
Nothing here touches devices, optimisers or files: the trainer calls these functions.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

NEG_INF = float("-inf")


def masked_topk(q: torch.Tensor, mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k Q-values among the available chunks only (§3.2: top-k is taken *after* masking).

    Args:
        q: (B, N) Q-values.
        mask: (B, N) availability.
        k: how many to keep; rows with fewer available chunks pad with -inf.

    Returns:
        values (B, K) with -inf where no chunk is available, indices (B, K), K = min(k, N).
    """
    masked = q.masked_fill(~mask, NEG_INF)  # (B, N)
    return masked.topk(min(k, q.shape[-1]), dim=-1)  # (B, K), (B, K)


def greedy_actions(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) argmax over the available chunks (evaluation and inference act greedily)."""
    _check_any_available(mask)
    return q.masked_fill(~mask, NEG_INF).argmax(dim=-1)  # (B,)


def boltzmann_actions(
    q: torch.Tensor, mask: torch.Tensor, k: int, alpha: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sample from `softmax((Q − max Q)/α)` over the masked top-k (§3.2). Returns (B,) chunk indices."""
    return explore_actions(q, mask, k, alpha, 0.0, generator)


def explore_actions(
    q: torch.Tensor, mask: torch.Tensor, k: int, temperature: float, epsilon: float = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Acting policy over the masked top-k: Boltzmann at `temperature`, and with probability `epsilon` a
    uniform pick among the same top-k instead (whatever their Q gap). Returns (B,) chunk indices.

    The temperature is the acting policy's own, kept apart from the soft value's α: exploring more does
    not raise the `α·ln k` bias of the bootstrapped targets (docs/LEARNER.md).
    """
    _check_any_available(mask)
    values, indices = masked_topk(q, mask, k)  # (B, K)
    logits = (values - values[:, :1]) / temperature  # (B, K) first column is the max; -inf stays -inf
    probs = torch.softmax(logits.float(), dim=-1).cpu()  # (B, K)
    if epsilon > 0:
        avail = torch.isfinite(values).float().cpu()  # (B, K)
        probs = (1.0 - epsilon) * probs + epsilon * avail / avail.sum(dim=-1, keepdim=True)
    pick = torch.multinomial(probs, 1, generator=generator).to(q.device)  # (B, 1)
    return indices.gather(1, pick).squeeze(1)  # (B,)


def uniform_actions(mask: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """(B,) uniformly random available chunks (the first `learning_starts` transitions)."""
    _check_any_available(mask)
    probs = mask.float().cpu()  # (B, N)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1).to(mask.device)  # (B,)


def soft_value(q: torch.Tensor, mask: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """`V(s) = α · logsumexp(Q/α)` over the masked top-k (§3.3). Rows with nothing available get 0.

    Args:
        q: (B, N) Q-values (from the target towers).
        mask: (B, N) availability.

    Returns:
        (B,) soft values.
    """
    values, _ = masked_topk(q, mask, k)  # (B, K)
    v = alpha * torch.logsumexp(values.float() / alpha, dim=-1)  # (B,) -inf when the row is empty
    return torch.where(mask.any(dim=-1), v, torch.zeros_like(v))


def ensemble_soft_value(
    q_heads: torch.Tensor, mask: torch.Tensor, k: int, alpha: float, mode: Literal["mean", "min"] = "mean"
) -> torch.Tensor:
    """Soft value from the two-head ensemble (§3.3).

    'mean' (default): the soft value of `Q̄ = Q̄1 + Q̄2`, the ensemble mean of the heads' estimates
    `2·Q̄1` and `2·Q̄2` (not the biased sum of each head's own maximum). 'min': the top-k set is chosen
    on Q̄, each head's soft value over that set is computed from its own estimate `2·Q̄h`, and the
    smaller is kept (clipped double-Q).

    Args:
        q_heads: (2, B, N) per-head Q-values `⟨s^h, a^h⟩`.
        mask: (B, N) availability.

    Returns:
        (B,) soft values.
    """
    q = q_heads.sum(dim=0)  # (B, N)
    if mode == "mean":
        return soft_value(q, mask, k, alpha)
    if mode != "min":
        raise ValueError(f"value_target must be 'mean' or 'min', got {mode!r}.")
    values, idx = masked_topk(q, mask, k)  # (B, K)
    per_head = 2.0 * q_heads.gather(2, idx.unsqueeze(0).expand(2, -1, -1))  # (2, B, K)
    per_head = per_head.masked_fill(torch.isinf(values).unsqueeze(0), NEG_INF)  # (2, B, K)
    v = alpha * torch.logsumexp(per_head.float() / alpha, dim=-1)  # (2, B)
    v = v.min(dim=0).values  # (B,)
    return torch.where(mask.any(dim=-1), v, torch.zeros_like(v))


def lambda_returns(
    rewards: torch.Tensor, dones: torch.Tensor, next_values: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """λ-returns computed backward over each environment's rollout segment (§3.4).

    `G_{T−1} = r_{T−1} + γ(1 − d_{T−1}) V(s_T)` and
    `G_t = r_t + γ(1 − d_t) [(1 − λ) V(s_{t+1}) + λ G_{t+1}]`. `(1 − d_t)` cuts the recursion at episode
    ends, so a segment may span several episodes; every one of the T transitions gets a target.

    Args:
        rewards: (T, E).
        dones: (T, E) 1 where the transition ended its episode (terminated or truncated).
        next_values: (T, E) `V(s_{t+1})`; row T−1 is the value of the extra state collected after the segment.

    Returns:
        (T, E) targets.
    """
    not_done = 1.0 - dones.float()  # (T, E)
    returns = torch.empty_like(rewards, dtype=torch.float32)  # (T, E)
    g = rewards[-1] + gamma * not_done[-1] * next_values[-1]  # (E,)
    returns[-1] = g
    for t in range(rewards.shape[0] - 2, -1, -1):
        g = rewards[t] + gamma * not_done[t] * ((1.0 - lam) * next_values[t] + lam * g)  # (E,)
        returns[t] = g
    return returns


def td_loss(q1: torch.Tensor, q2: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """`½·MSE(2·Q1, G) + ½·MSE(2·Q2, G)` (§3.5): each half, scaled by 2, regresses the same target.

    Args:
        q1, q2: (B,) the two heads' values for the taken chunks.
        targets: (B,) λ-returns (no gradient).
    """
    g = targets.detach().float()  # (B,)
    return 0.5 * ((2.0 * q1.float() - g) ** 2).mean() + 0.5 * ((2.0 * q2.float() - g) ** 2).mean()


def margin_loss(
    q: torch.Tensor, available: torch.Tensor, gold: torch.Tensor, margin: float, over: Literal["best", "all"] = "best"
) -> torch.Tensor:
    """Large-margin loss of Q-learning from demonstrations (DQfD, Hester et al. 2018), with the supporting
    facts as the demonstrator: at a visited state, the best remaining gold chunk must score at least
    `margin` above every other available chunk (docs/LEARNER.md, "Supervision from the supporting facts").

    `J = max(0, max_{a ∉ gold} Q(s, a) + m − max_{g ∈ gold} Q(s, g))` (`over='best'`, DQfD's form), or the
    sum of that hinge over every other available chunk a (`over='all'`, the Weston–Watkins multi-class
    hinge: every chunk inside the margin gets its own gradient), averaged over the batch; a state without a
    remaining gold chunk or without another available chunk counts 0 (nothing to rank).

    Args:
        q: (B, N) Q-values of every chunk at each state.
        available: (B, N) chunks that may be taken.
        gold: (B, N) supporting chunks not yet taken (a subset of `available`).
        margin: m, in Q units.

    Returns:
        () the batch's mean loss.
    """
    other = available & ~gold  # (B, N)
    rows = gold.any(dim=-1) & other.any(dim=-1)  # (B,) states the constraint applies to
    if not bool(rows.any()):
        return q.sum() * 0.0
    q = q[rows].float()  # (B', N)
    best_gold = q.masked_fill(~gold[rows], NEG_INF).max(dim=-1).values  # (B',)
    if over == "all":
        hinge = torch.relu(q + margin - best_gold.unsqueeze(-1)).masked_fill(~other[rows], 0.0)  # (B', N)
        return hinge.sum() / q.new_tensor(float(gold.shape[0]))
    if over != "best":
        raise ValueError(f"over must be 'best' or 'all', got {over!r}.")
    best_other = q.masked_fill(~other[rows], NEG_INF).max(dim=-1).values  # (B',)
    return torch.relu(best_other + margin - best_gold).sum() / q.new_tensor(float(gold.shape[0]))


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """`θ̄ ← (1 − τ)·θ̄ + τ·θ` for every parameter the online network trains (frozen ones are equal)."""
    target_params = dict(target.named_parameters())
    for name, p in online.named_parameters():
        if p.requires_grad:
            target_params[name].lerp_(p.detach().to(target_params[name].dtype), tau)


def lr_factor(step: int, warmup_steps: int, progress: float, schedule: Literal["constant", "linear", "cosine"]) -> float:
    """Multiplier of the peak learning rate: a linear warm-up over the first `warmup_steps` optimiser steps,
    then a clamped decay over `progress`, the share of the run's budget spent (0 → 1; the trainer's
    `progress`: transitions or minutes, whichever binds), so a timed run decays over the time it really has."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, max(0.0, progress))
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def linear_decay(start: float, end: float | None, progress: float) -> float:
    """`start` moved linearly to `end` as `progress` goes 0 → 1 (α's own schedule); `end=None` keeps it."""
    if end is None:
        return start
    p = min(1.0, max(0.0, progress))
    return start + (end - start) * p


def _check_any_available(mask: torch.Tensor) -> None:
    if not bool(mask.any(dim=-1).all()):
        raise ValueError("a state has no available chunk left; the environment should have ended that episode.")
