"""The nearest passages of a pool by cosine (the bundled MiniLM) and by BM25, for hard negatives.

`qrag.training.data.negatives` is handed `pool_neighbours` by the floors above it (the data floor imports no model).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import cached_property

import torch

from qrag.training.model.qnet import QNetwork
from qrag.training.search.lexical import LexicalIndex, corpus_lexical

NEIGHBOUR_ENCODER = "all-MiniLM-L6-v2"
NEIGHBOUR_TOKENS = 256


class PoolNeighbours:
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
        return QNetwork.from_encoder(NEIGHBOUR_ENCODER, train_towers="state", max_chunk_tokens=NEIGHBOUR_TOKENS,
                                     normalize=True, scale=1.0).eval()

    def adopt(self, vectors: torch.Tensor, key: str) -> bool:
        """Take the pool's vectors from elsewhere when they are this lookup's own (`key`: the chunk-vectors key of
        the tower that embedded them, `QNetwork.chunk_vectors_key`); returns whether it took them."""
        if key != self.model.chunk_vectors_key() or vectors.shape[0] != len(self.passages):
            return False
        self._vectors = vectors
        return True

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
            self._bm25 = corpus_lexical(tuple(self.passages))  # shared with an index of the same texts
        return self._bm25.top(queries, k)[1].tolist()  # type: ignore[no-any-return]


def pool_neighbours(passages: Sequence[str], vectors: torch.Tensor | None = None, name: str = "pool") -> PoolNeighbours:
    """A pool's neighbour lookup (`qrag.training.data.negatives.NeighbourSearch`)."""
    return PoolNeighbours(passages, vectors, name)
