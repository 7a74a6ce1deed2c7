"""Hard negatives for passage questions: the passages of a pool a search would confuse with the gold ones.

An episode holds a question's gold passages and `n` others of its pool: three quarters hard negatives, taken
round-robin from the cosine neighbours (the bundled MiniLM, mean-pooled and normalised, 256 tokens) of the question
and of each gold passage and the BM25 neighbours of the question (`qrag.training.lexical`), nearest first; the rest
drawn at random; shuffled. The `hotpotqa_pool` and `corpus` sources build their training and validation episodes
this way, so training sees what a search of the whole pool sees.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

import torch

from qrag.training.lexical import LexicalIndex

if TYPE_CHECKING:
    from qrag.training.qnet import QNetwork

HARD_SHARE = 0.75  # share of an episode's distractors that are nearest neighbours; the rest are random
NEIGHBOUR_ENCODER = "all-MiniLM-L6-v2"
NEIGHBOUR_TOKENS = 256
GROUP = 64  # questions whose neighbours are looked up together


class Neighbours:
    """The nearest passages of a pool by cosine (the bundled MiniLM) and by BM25.

    Args:
        passages: The pool.
        vectors: Their (N, D) unit-length MiniLM vectors, when already computed (else embedded here, once).
        name: What the pool is, for the line printed while embedding it.
    """

    def __init__(self, passages: Sequence[str], vectors: torch.Tensor | None = None, name: str = "pool") -> None:
        self.passages, self.name = list(passages), name
        self._vectors = vectors
        self._bm25: LexicalIndex | None = None

    @cached_property
    def model(self) -> QNetwork:
        from qrag.training.qnet import QNetwork

        return QNetwork.from_encoder(NEIGHBOUR_ENCODER, train_towers="state", max_chunk_tokens=NEIGHBOUR_TOKENS,
                                     normalize=True, scale=1.0).eval()

    @property
    def vectors(self) -> torch.Tensor:
        """(N, D) unit-length MiniLM vectors of the pool, embedded the first time they are needed."""
        if self._vectors is None:
            print(f"embedding the {self.name}'s {len(self.passages)} passages for hard negatives", file=sys.stderr)
            with torch.no_grad():
                self._vectors = self.model.embed_chunks(self.passages, precision="auto")  # (N, D)
        return self._vectors

    def cosine(self, queries: list[str], rows: list[int], k: int) -> list[list[int]]:
        """The k nearest pool passages by cosine of each query, then of each pool passage given by its row."""
        with torch.no_grad():
            q = self.model.embed_chunks(queries, precision="auto") if queries else self.vectors[:0]  # (Q, D)
            sims = torch.cat([q, self.vectors[rows]]) @ self.vectors.T  # (Q + P, N)
            return sims.topk(min(k, self.vectors.shape[0]), dim=1).indices.tolist()  # type: ignore[no-any-return]

    def bm25(self, queries: list[str], k: int) -> list[list[int]]:
        """The k pool passages BM25 ranks highest for each query, best first."""
        if self._bm25 is None:
            self._bm25 = LexicalIndex.from_texts(self.passages)
        return self._bm25.top(queries, k)[1].tolist()  # type: ignore[no-any-return]


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
