"""Hard negatives for passage questions: the passages of a pool a search would confuse with the gold ones.

An episode holds a question's gold passages and `n` others of its pool: three quarters hard negatives, taken
round-robin from the cosine neighbours (the bundled MiniLM, mean-pooled and normalised, 256 tokens) of the question
and of each gold passage and the BM25 neighbours of the question, nearest first; the rest drawn at random; shuffled.
The neighbours come from a `Neighbours` lookup the caller hands in (`qrag.training.search.pool_neighbours`). The `hotpotqa_pool` and `corpus` sources build their training and validation episodes
this way, so training sees what a search of the whole pool sees.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

HARD_SHARE = 0.75  # share of an episode's distractors that are nearest neighbours; the rest are random
GROUP = 64  # questions whose neighbours are looked up together


class Neighbours(Protocol):
    """The nearest passages of one pool: what hard negatives need from a retriever. The data floor is handed
    one (`qrag.training.search.pool_neighbours` builds it: the bundled MiniLM by cosine, and BM25)."""

    passages: list[str]

    @property
    def vectors(self) -> torch.Tensor:
        """(N, D) unit-length vectors of the pool."""
        ...

    def cosine(self, queries: list[str], rows: list[int], k: int) -> list[list[int]]:
        """The k nearest pool passages by cosine of each query, then of each pool passage given by its row."""
        ...

    def bm25(self, queries: list[str], k: int) -> list[list[int]]:
        """The k pool passages BM25 ranks highest for each query, best first."""
        ...


NeighbourSearch = Callable[[Sequence[str], "torch.Tensor | None", str], Neighbours]
"""Builds a pool's `Neighbours` from its passages, their vectors when already computed (else None) and what the
pool is (for messages): `qrag.training.search.pool_neighbours`."""


def need_search(search: NeighbourSearch | None, source: str) -> NeighbourSearch:
    """`search`, or a ValueError saying how to hand one in (a source asked for negatives without it)."""
    if search is None:
        raise ValueError(f"source {source!r} with num_distractors draws hard negatives by searching its pool: pass "
                         "neighbours=qrag.training.search.pool_neighbours (qrag-train and qrag-eval do), or leave "
                         "num_distractors unset (the whole pool).")
    return search


def choose_negatives(lists: Sequence[Sequence[int]], gold: Sequence[int], n: int, pool_size: int,
                     rng: random.Random) -> list[int]:
    """`n` negatives: round(n · HARD_SHARE) round-robin over the neighbour `lists` (nearest first), the rest random
    pool rows; never a gold row, never twice (fewer when the pool runs out)."""
    avoid, hard_n = set(gold), round(n * HARD_SHARE)
    chosen: list[int] = []
    for column in zip(*lists, strict=False):  # round-robin over the lists, nearest first
        for i in column:
            if len(chosen) < hard_n and i not in avoid and i not in chosen:
                chosen.append(i)
    while len(chosen) < min(n, pool_size - len(avoid)):
        i = rng.randrange(pool_size)
        if i not in avoid and i not in chosen:
            chosen.append(i)
    return chosen


def negatives_for(neighbours: Neighbours, questions: Sequence[str], golds: Sequence[Sequence[int]], n: int,
                  rng: random.Random) -> Iterator[list[int]]:
    """Per question, in order, its `n` negatives (`choose_negatives` over the cosine neighbours of the question and
    of each of its gold passages and the BM25 neighbours of the question), looked up `GROUP` questions at a time.
    A generator: what the caller draws from `rng` between two questions comes between their draws."""
    hard_n = round(n * HARD_SHARE)
    for start in range(0, len(questions), GROUP):
        qs, gs = list(questions[start : start + GROUP]), list(golds[start : start + GROUP])
        want = hard_n + max((len(g) for g in gs), default=0)
        flat = [g for gold in gs for g in gold]
        near_q = neighbours.cosine(qs, flat, want)
        near_bm = neighbours.bm25(qs, want) if hard_n else [[] for _ in qs]
        at = len(qs)
        for b, gold in enumerate(gs):
            lists = [near_q[b], *near_q[at : at + len(gold)], near_bm[b]]
            at += len(gold)
            yield choose_negatives(lists, gold, n, len(neighbours.passages), rng)
