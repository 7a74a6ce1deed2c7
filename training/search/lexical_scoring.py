"""What a hop makes of BM25 scores (METHOD.md §4.5): the state's text, the scaled evidence, rank fusion.

The evidence is scaled by the best available chunk; rank fusion is reciprocal-rank fusion.

Shape legend: R queries (state rows), N chunks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

RRF_C = 60
"""The c of reciprocal-rank fusion (LangChain's and LlamaIndex's default)."""


def state_text(question: str, taken: Sequence[str]) -> str:
    """The text BM25 reads for a state: the question and the passages taken so far."""
    return " ".join([question, *taken])


def lexical_evidence(scores: torch.Tensor, available: torch.Tensor) -> torch.Tensor:
    """(R, N) BM25 scores scaled to [0, 1] by each row's best available chunk; 0 on unavailable chunks and on rows
    where no available chunk shares a word with the query.

    Args:
        scores: (R, N) BM25 scores.
        available: (R, N) chunks the hop may take (not taken, not padding).
    """
    kept = scores.clamp(min=0.0).masked_fill(~available, 0.0)  # (R, N)
    best = kept.max(dim=1, keepdim=True).values  # (R, 1)
    return torch.where(best > 0, kept / best.clamp(min=1e-12), torch.zeros_like(kept))  # (R, N)


def reciprocal_rank_fusion(rankings: Sequence[torch.Tensor], weights: Sequence[float] | None = None,
                           c: int = RRF_C) -> torch.Tensor:
    """(N,) fused scores Σ_i w_i / (c + rank_i(n)) of score vectors over the same N items (rank 1 = best; ties keep
    the items' order).

    Args:
        rankings: Score vectors (N,), higher is better.
        weights: One per ranking (default: equal weights of 1).
    """
    weights = [1.0] * len(rankings) if weights is None else list(weights)
    if len(weights) != len(rankings) or not rankings:
        raise ValueError(f"got {len(rankings)} rankings and {len(weights)} weights; pass one weight per ranking.")
    fused = torch.zeros(rankings[0].shape[-1], dtype=torch.float64)
    for scores, w in zip(rankings, weights, strict=True):
        order = torch.sort(scores.detach().float().cpu(), descending=True, stable=True).indices  # (N,)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(1, len(order) + 1)
        fused += w / (c + rank.double())
    return fused
