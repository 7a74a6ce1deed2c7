"""BM25 evidence beside an external store's Q-values: the hybrid hops of METHOD.md §4.5 over a vector database.

The store ranks by the Q-value alone; qrag holds the BM25 index of its documents in-process (read once, kept in step
through qrag's `add_texts` / `delete`) and ranks each hop by Q + ω · evidence, exactly as over a `ChunkIndex`. The
evidence is in [0, 1], so a chunk the store has not returned scores at most (the lowest Q returned) + ω · (its
evidence): the store is asked for more until no such chunk can reach the top. Framework-free.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import torch

from qrag.training.search import Chunk, Filter, LexicalIndex, ScoredChunk, lexical_evidence

# (queries (R, D), n, exclude, where) → the store's n best (chunk, Q-value) per row
VectorSearch = Callable[[torch.Tensor, int, Sequence[Collection[str]], Filter | None], list[list[ScoredChunk]]]
Hybrid = tuple[Chunk, float, float]  # (chunk, Q-value, Q + ω · evidence)


class StoreLexical:
    """The BM25 index of an external store's documents, row i for `ids[i]`, with their metadata (what a filter reads).

    Args:
        ids: The stored documents' ids, as the store's search names its chunks.
        texts: Their texts (what BM25 reads).
        metadatas: Their metadata.
        pairs: Index word pairs too (models with a pair weight).
    """

    def __init__(self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], *,
                 pairs: bool) -> None:
        self.ids, self.metadatas = list(ids), [dict(m) for m in metadatas]
        self.rows = {cid: i for i, cid in enumerate(self.ids)}
        self.lexical: LexicalIndex | None = LexicalIndex.from_texts(list(texts), pairs=pairs) if texts else None
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.ids)

    def added(self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Take in documents just added to the store."""
        if not ids:
            return
        self.lexical = (LexicalIndex.from_texts(list(texts), pairs=self.pairs) if self.lexical is None
                        else self.lexical.added(list(texts)))
        self.ids += list(ids)
        self.metadatas += [dict(m) for m in metadatas]
        self.rows = {cid: i for i, cid in enumerate(self.ids)}

    def deleted(self, ids: Collection[str]) -> None:
        """Drop documents just deleted from the store."""
        rows = sorted({self.rows[i] for i in ids if i in self.rows})
        if not rows or self.lexical is None:
            return
        self.lexical = self.lexical.deleted(rows) if len(rows) < len(self.ids) else None
        gone = set(rows)
        self.ids = [c for r, c in enumerate(self.ids) if r not in gone]
        self.metadatas = [m for r, m in enumerate(self.metadatas) if r not in gone]
        self.rows = {cid: i for i, cid in enumerate(self.ids)}

    def search(self, search: VectorSearch, states: torch.Tensor, k: int, exclude: Sequence[Collection[str]],
               where: Filter | None, texts: Sequence[str], questions: Sequence[str], weight: float,
               pair_weight: float) -> list[list[Hybrid]]:
        """Per state row (R, D): the `k` best chunks by Q + `weight` · evidence of the state's text `texts[r]` (plus
        `pair_weight` × the question's word pairs' evidence), exactly as over an in-process index; the excluded ids
        and those `where` refuses are never returned."""
        n = len(self.ids)
        allowed = torch.ones(n, dtype=torch.bool)  # (N,)
        if where is not None:
            allowed = torch.tensor([where.matches(m) for m in self.metadatas], dtype=torch.bool)
        available = allowed.repeat(len(texts), 1)  # (R, N)
        for r, skip in enumerate(exclude):
            available[r, [self.rows[i] for i in skip if i in self.rows]] = False
        evidence = torch.zeros(len(texts), n)  # (R, N)
        if self.lexical is not None:
            evidence = lexical_evidence(self.lexical.scores(list(texts)), available)  # (R, N)
            if pair_weight > 0 and self.lexical.pairs is not None:
                evidence += pair_weight * lexical_evidence(self.lexical.pair_scores(list(questions)), available)
        return [self._row(search, states[r : r + 1], k, exclude[r], where, evidence[r], available[r], weight)
                for r in range(len(texts))]

    def _row(self, search: VectorSearch, state: torch.Tensor, k: int, skip: Collection[str], where: Filter | None,
             evidence: torch.Tensor, available: torch.Tensor, weight: float) -> list[Hybrid]:
        fetch = max(2 * k, k + 10)
        while True:
            hits = search(state, fetch, [skip], where)[0]  # best Q first
            scored = sorted(((c, q, q + weight * self._evidence(evidence, c.id)) for c, q in hits),
                            key=lambda h: -h[2])
            if len(hits) < fetch or fetch >= len(self.ids) + len(skip):
                return scored[:k]  # the store has nothing more to give
            unseen = available.clone()  # (N,)
            unseen[[self.rows[c.id] for c, _ in hits if c.id in self.rows]] = False
            best_unseen = hits[-1][1] + weight * float(evidence.masked_fill(~unseen, 0.0).max())
            if len(scored) >= k and best_unseen < scored[k - 1][2]:
                return scored[:k]
            fetch *= 4

    def _evidence(self, evidence: torch.Tensor, cid: str) -> float:
        row = self.rows.get(cid)
        return 0.0 if row is None else float(evidence[row])  # a document added to the store past qrag: Q alone
