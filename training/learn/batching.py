"""The update's minibatches: their inputs (`Minibatch`) and their length groups.

A transformer batch is padded to its longest row. States in a rollout range from the bare question to the
question plus every taken chunk, so one padded minibatch is mostly padding (docs/RESULTS.md measures it).
Encoding the rows in a few groups of similar length, each padded only to its own longest row, computes
the same vectors (padding is masked out of attention) with far fewer tokens. The trainer sums the groups'
losses weighted by their sizes, which is the minibatch's loss and gradient.

Shape legend: B rows kept of a minibatch, L tokens, D vector dim, N chunks of the longest episode.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from qrag.training.model.trunk import StateParts
    from qrag.training.search.hops import Corpora


@dataclass
class Minibatch:
    """One update minibatch's inputs, on the training device.

    Attributes:
        size: Rows drawn from the rollout; the losses are means over these (rows left out count 0).
        rows: (B,) the rollout rows kept: those whose loss has a gradient.
        states: Tokenised states, (B, L) ids and mask; or, with `trainer.train_layers`, each row's `StateParts`.
        chunks: The taken chunks, tokenised (B, L), or their (B, D) vectors with a frozen chunk tower.
        positions: (B,) positions of the taken chunks; None in position mode 'none'.
        targets: (B,) λ-returns.
        groups: Indices into the B rows, in groups of similar state length (`length_groups`).
        margin: With the margin loss: the rows' episodes as the hop engine's corpora, what each state had taken,
            and the (B, N) mask of the supporting chunks; else None.
    """

    size: int
    rows: list[int]
    states: dict[str, torch.Tensor] | list[StateParts]
    chunks: dict[str, torch.Tensor] | torch.Tensor
    positions: torch.Tensor | None
    targets: torch.Tensor
    groups: list[list[int]]
    margin: tuple[Corpora, list[list[int]], torch.Tensor] | None


def length_groups(lengths: Sequence[int], max_groups: int) -> list[list[int]]:
    """Indices of `lengths` in at most `max_groups` groups of consecutive lengths (sorted, shortest first)
    that minimise the padded area `Σ_g |g| · max(lengths in g)`, found exactly by dynamic programming.

    Example:
        >>> length_groups([10, 50, 12, 48], 2)
        [[0, 2], [3, 1]]
        >>> length_groups([10, 50, 12, 48], 1)
        [[0, 2, 3, 1]]
    """
    if max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}.")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    n = len(order)
    if n == 0:
        return []
    if max_groups == 1:  # the only partition: no search (the trainer calls this for every minibatch)
        return [order]
    sl = [lengths[i] for i in order]
    g_max = min(max_groups, n)
    inf = float("inf")
    # best[g][j]: least padded area of the first j sorted rows in exactly g groups; cut[g][j]: where its last group starts.
    best = [[inf] * (n + 1) for _ in range(g_max + 1)]
    cut = [[0] * (n + 1) for _ in range(g_max + 1)]
    best[0][0] = 0.0
    for g in range(1, g_max + 1):
        for j in range(1, n + 1):
            for i in range(g - 1, j):
                cost = best[g - 1][i] + (j - i) * sl[j - 1]
                if cost < best[g][j]:
                    best[g][j], cut[g][j] = cost, i
    g = min(range(1, g_max + 1), key=lambda k: (best[k][n], k))  # fewest groups among the least areas
    groups, j = [], n
    while g > 0:
        i = cut[g][j]
        groups.append(order[i:j])
        j, g = i, g - 1
    return groups[::-1]


def take_rows(inputs: dict[str, torch.Tensor], rows: Sequence[int]) -> dict[str, torch.Tensor]:
    """The `rows` of padded (B, L) inputs, with the columns that are padding in every kept row cut off."""
    index = torch.as_tensor(list(rows), dtype=torch.long, device=inputs["attention_mask"].device)
    mask = inputs["attention_mask"][index]  # (G, L)
    width = int(mask.sum(dim=1).max()) if len(rows) else 0
    return {k: v[index][:, :width] for k, v in inputs.items()}
