"""BM25 evidence beside an external store's Q-values: the hybrid hops of METHOD.md §4.5 over a vector database.

The store ranks by the Q-value alone; qrag holds the BM25 index of its documents in-process (read once, texts and
ids only, kept in step through qrag's `add_texts` / `delete`) and ranks each hop by Q + ω · evidence, exactly as over
a `ChunkIndex`. The evidence is in [0, 1], so a chunk the store has not returned scores at most (the lowest Q
returned) + ω · (its evidence): the store is asked for more until no such chunk can reach the top.

The index is versioned like the in-process one: an add or a delete makes a new `LexicalVersion` and swaps it in
whole, and a search reads one version from its first row to its last, so its ids, rows, metadata and BM25 always
agree. A chunk BM25 holds that could still reach the top but that the store no longer returns (deleted past this
index, through another retriever or outside qrag) is looked up in the store (`held`): one the store no longer holds
is dropped from the index, not fetched for. A store that hands back chunks by id with their stored vectors (`lookup`:
every store qrag reads) is not asked again at all while few chunks block: those are scored exactly from their own
vectors (⟨state, x⟩ is the Q-value the store's search would have reported), so a hop costs one search and at most one
lookup. Without `lookup`, or with more than `EXACT` blocking, the store is asked for four times more; a store whose own
filter refuses a chunk qrag's filter allows would keep the search asking: after `MAX_ROUNDS` calls it ranks what the
store returned. Framework-free.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from qrag.training.search import Chunk, Filter, LexicalIndex, ScoredChunk, lexical_evidence

# (queries (R, D), n, exclude, where) → the store's n best (chunk, Q-value) per row
VectorSearch = Callable[[torch.Tensor, int, Sequence[Collection[str]], Filter | None], list[list[ScoredChunk]]]
Held = Callable[[Sequence[str]], set[str]]  # which of these ids the store still holds
Lookup = Callable[[Sequence[str]], list[tuple[Chunk, Sequence[float]]]]  # those of these ids it holds, with stored vectors
Hybrid = tuple[Chunk, float, float]  # (chunk, Q-value, Q + ω · evidence)
MAX_ROUNDS = 4
"""Most store calls one row of a hop makes (each asks for four times more than the last)."""
LOOKUPS = 64
"""Most ids a row looks up in the store at a time (those whose evidence could still reach the top)."""
EXACT = 256
"""Most blocking chunks a row scores from their stored vectors (`Lookup`) instead of asking the store for more."""


@dataclass(frozen=True)
class LexicalVersion:
    """One version of the BM25 index of a store's documents: row i is `ids[i]`, with its metadata."""

    ids: tuple[str, ...]
    rows: Mapping[str, int]
    metadatas: tuple[Mapping[str, Any], ...]
    lexical: LexicalIndex | None

    @classmethod
    def build(cls, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]], lexical: LexicalIndex | None,
              ) -> LexicalVersion:
        return cls(tuple(ids), {cid: i for i, cid in enumerate(ids)}, tuple(metadatas), lexical)


class StoreLexical:
    """The BM25 index of an external store's documents, by version (`LexicalVersion`), with their metadata (what a
    filter reads).

    Args:
        ids: The stored documents' ids, as the store's search names its chunks.
        texts: Their texts (what BM25 reads).
        metadatas: Their metadata.
        pairs: Index word pairs too (models with a pair weight).
    """

    def __init__(self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], *,
                 pairs: bool) -> None:
        self.pairs = pairs
        lexical = LexicalIndex.from_texts(list(texts), pairs=pairs) if texts else None
        self._version = LexicalVersion.build(list(ids), [dict(m) for m in metadatas], lexical)
        self._swap = threading.Lock()  # one new version at a time

    @property
    def version(self) -> LexicalVersion:
        """The current version (a search reads one throughout)."""
        return self._version

    @property
    def ids(self) -> tuple[str, ...]:
        return self._version.ids

    def __len__(self) -> int:
        return len(self._version.ids)

    def added(self, ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Take in documents just added to the store (a new version)."""
        if not ids:
            return
        with self._swap:
            v = self._version
            lexical = (LexicalIndex.from_texts(list(texts), pairs=self.pairs) if v.lexical is None
                       else v.lexical.added(list(texts)))
            self._version = LexicalVersion.build([*v.ids, *ids], [*v.metadatas, *(dict(m) for m in metadatas)],
                                                 lexical)

    def deleted(self, ids: Collection[str]) -> None:
        """Drop documents just deleted from the store (a new version; ids it does not hold are ignored)."""
        with self._swap:
            v = self._version
            rows = sorted({v.rows[i] for i in ids if i in v.rows})
            if not rows or v.lexical is None:
                return
            lexical = v.lexical.deleted(rows) if len(rows) < len(v.ids) else None
            gone = set(rows)
            self._version = LexicalVersion.build([c for r, c in enumerate(v.ids) if r not in gone],
                                                 [m for r, m in enumerate(v.metadatas) if r not in gone], lexical)

    def memory(self) -> dict[str, int]:
        """Bytes the current version holds: `lexical` its BM25 arrays and vocabulary (`LexicalIndex.memory`), `ids`
        the id strings and their row map, `metadata` the metadata dicts (shallow: their keys and values)."""
        v = self._version
        ids = sum(map(sys.getsizeof, v.ids)) + sys.getsizeof(v.ids) + sys.getsizeof(v.rows)
        meta = sum(sys.getsizeof(m) + sum(sys.getsizeof(k) + sys.getsizeof(x) for k, x in m.items())
                   for m in v.metadatas)
        lexical = v.lexical.memory() if v.lexical is not None else {}
        return {"lexical": lexical.get("arrays", 0) + lexical.get("vocabulary", 0), "ids": ids, "metadata": meta}

    def search(self, search: VectorSearch, states: torch.Tensor, k: int, exclude: Sequence[Collection[str]],
               where: Filter | None, texts: Sequence[str], questions: Sequence[str], weight: float,
               pair_weight: float, held: Held | None = None, lookup: Lookup | None = None) -> list[list[Hybrid]]:
        """Per state row (R, D): the `k` best chunks by Q + `weight` · evidence of the state's text `texts[r]` (plus
        `pair_weight` × the question's word pairs' evidence), exactly as over an in-process index; the excluded ids
        and those `where` refuses are never returned. One version throughout; each row's evidence is (N,), never a
        (rows × documents) block. `held(ids)`: which ids the store still holds (None: never looked up);
        `lookup(ids)`: the held ones' chunks and stored vectors (None: the store is asked for more instead)."""
        v = self._version
        n = len(v.ids)
        allowed = torch.ones(n, dtype=torch.bool)  # (N,)
        if where is not None:
            allowed = torch.tensor([where.matches(m) for m in v.metadatas], dtype=torch.bool)
        out: list[list[Hybrid]] = []
        gone: set[str] = set()
        for r in range(len(texts)):
            available = allowed.clone()  # (N,)
            available[[v.rows[i] for i in exclude[r] if i in v.rows]] = False
            evidence = torch.zeros(n)  # (N,)
            if v.lexical is not None:
                evidence = lexical_evidence(v.lexical.scores([texts[r]]), available[None])[0]  # (N,)
                if pair_weight > 0 and v.lexical.pairs is not None:
                    pairs = v.lexical.pair_scores([questions[r]])  # (1, N)
                    evidence = evidence + pair_weight * lexical_evidence(pairs, available[None])[0]
            out.append(self._row(v, search, states[r : r + 1], k, exclude[r], where, evidence, available, weight,
                                 held, lookup, gone))
        if gone:
            self.deleted(gone)  # the store no longer holds them: later searches do not look for them again
        return out

    def _row(self, v: LexicalVersion, search: VectorSearch, state: torch.Tensor, k: int, skip: Collection[str],
             where: Filter | None, evidence: torch.Tensor, available: torch.Tensor, weight: float, held: Held | None,
             lookup: Lookup | None, gone: set[str]) -> list[Hybrid]:
        fetch = max(2 * k, k + 10)
        for rounds in range(1, MAX_ROUNDS + 1):
            hits = search(state, fetch, [skip], where)[0]  # best Q first
            scored = _ranked(v, hits, evidence, weight)
            if len(hits) < fetch or fetch >= len(v.ids) + len(skip) or rounds == MAX_ROUNDS:
                return scored[:k]  # the store has nothing more to give (or was asked enough)
            unseen = available.clone()  # (N,)
            unseen[[v.rows[c.id] for c, _ in hits if c.id in v.rows]] = False
            while len(scored) >= k:
                unseen[[v.rows[i] for i in gone if i in v.rows]] = False
                bound = hits[-1][1] + weight * evidence.masked_fill(~unseen, 0.0)  # (N,) best score each could have
                blocking = (unseen & (bound >= scored[k - 1][2])).nonzero().flatten()
                if not len(blocking):
                    return scored[:k]
                if lookup is not None and len(blocking) <= EXACT:
                    ids = [v.ids[int(i)] for i in blocking]
                    found = lookup(ids)
                    gone |= set(ids) - {c.id for c, _ in found}
                    if any(len(x) != state.shape[1] for _, x in found):
                        break  # a stored vector this state cannot be scored against: ask the store instead
                    if not found:
                        return scored[:k]
                    stored = np.asarray([x for _, x in found], dtype=np.float32)  # (F, D): one copy of the rows
                    q = (torch.from_numpy(stored) @ state[0].float()).tolist()  # (F,) their Q-values
                    # every chunk that could beat the k-th is scored now: those unseen and not blocking could not
                    return _ranked(v, [*hits, *((c, qi) for (c, _), qi in zip(found, q, strict=True))], evidence,
                                   weight)[:k]
                if held is None:
                    break
                ids = [v.ids[int(i)] for i in blocking[:LOOKUPS]]
                missing = set(ids) - held(ids)
                if not missing:
                    break  # they are in the store: it must be asked for more
                gone |= missing
            fetch *= 4
        raise AssertionError("unreachable: the last round returns")


def _ranked(v: LexicalVersion, hits: Sequence[ScoredChunk], evidence: torch.Tensor, weight: float) -> list[Hybrid]:
    """The chunks with their Q-values as (chunk, Q, Q + `weight` · evidence), best hybrid score first."""
    return sorted(((c, q, q + weight * _evidence(v, evidence, c.id)) for c, q in hits), key=lambda h: -h[2])


def _evidence(v: LexicalVersion, evidence: torch.Tensor, cid: str) -> float:
    row = v.rows.get(cid)
    return 0.0 if row is None else float(evidence[row])  # a document added to the store past qrag: Q alone
