"""Lexical evidence (METHOD.md §4.5): BM25 over the chunks of a corpus, and reciprocal-rank fusion.

Shape legend: R queries (state rows), N chunks.

A model whose `HopSettings.lexical_weight` ω is above 0 ranks the chunks at every hop by

    score(s, c) = Q(s, c) + ω · BM25(text(s), c) / max_{c' available} BM25(text(s), c'),

text(s) being the state's text (the question and the passages taken so far), so a passage that shares rare words
with the question, or with a passage already taken (the bridge entity of a two-hop question), climbs the
ranking. The Q-value alone still drives the stop rule. BM25 is `bm25s`'s (Lucene's variant, k1 1.5, b 0.75,
lower-cased words, English stop words dropped), the same index the `bm25` and `hybrid` baselines of
`qrag-eval` search. `reciprocal_rank_fusion` is the fusion LangChain's `EnsembleRetriever` and LlamaIndex's
`QueryFusionRetriever` apply to BM25 and a vector store: Σ_i w_i / (c + rank_i), c = 60.

A `LexicalIndex` is saved as `bm25s` writes it: NumPy arrays (never pickled) and JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qrag.training.atomic import atomic_dir

__all__ = ["RRF_C", "LexicalIndex", "LexicalLoadError", "corpus_lexical", "lexical_evidence", "reciprocal_rank_fusion",
           "state_text"]

RRF_C = 60
"""The c of reciprocal-rank fusion (LangChain's and LlamaIndex's default)."""
HEADER_FILE = "lexical.json"
FORMAT = "qrag-lexical-index"
STOPWORDS = "en"


class LexicalLoadError(ValueError):
    """A saved lexical index is missing, damaged or belongs to another corpus; the message names the file and the fix."""


def _bm25s() -> Any:
    try:
        import bm25s
    except ImportError as e:  # a core dependency; an environment built without it gets the command
        raise ImportError("lexical evidence needs `bm25s`: pip install 'bm25s>=0.2'.") from e
    return bm25s


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    """Lower-cased words of each text, English stop words dropped (bm25s's tokenizer)."""
    out = _bm25s().tokenize(list(texts), stopwords=STOPWORDS, return_ids=False, show_progress=False)
    return [list(t) for t in out]


class LexicalIndex:
    """BM25 over a corpus's chunk texts, scoring every chunk for a query.

    Example:
        >>> index = LexicalIndex.from_texts(["The cat sat on the mat.", "Dogs bark.", "A cat is an animal."])
        >>> [round(float(s), 3) for s in index.scores(["cat animal"])[0]]
        [0.188, 0.0, 0.58]
    """

    def __init__(self, bm25: Any, count: int) -> None:
        self._bm25 = bm25
        self.count = count

    @classmethod
    def from_texts(cls, texts: Sequence[str]) -> LexicalIndex:
        """Index `texts` (one document per chunk, in the corpus's order)."""
        texts = list(texts)
        if not texts:
            raise ValueError("a lexical index needs at least one text.")
        bm25s = _bm25s()
        bm25 = bm25s.BM25()
        # Token ids of the corpus; texts without a single indexable word are kept (they score 0 for every query).
        bm25.index(bm25s.tokenize(texts, stopwords=STOPWORDS, show_progress=False), show_progress=False)
        return cls(bm25, len(texts))

    def __len__(self) -> int:
        return self.count

    def scores(self, queries: Sequence[str]) -> torch.Tensor:
        """(R, N) BM25 score of every chunk for each query (0 where a query shares no word with a chunk)."""
        out = np.zeros((len(queries), self.count), dtype=np.float32)
        for r, words in enumerate(_tokens(queries)):
            known = [w for w in words if w in self._bm25.vocab_dict]
            if known:
                out[r] = self._bm25.get_scores(known)  # (N,)
        return torch.from_numpy(out)

    def top(self, queries: Sequence[str], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, K) best BM25 scores and their chunk rows per query, best first, K = min(k, N) (bm25s's own top-k:
        ties, and queries that share no word with the corpus, come back in its order)."""
        k = min(k, self.count)
        docs, scores = self._bm25.retrieve(_tokens(queries), k=k, show_progress=False, n_threads=1)  # (R, K) each
        return torch.as_tensor(scores, dtype=torch.float32), torch.as_tensor(docs, dtype=torch.long)

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        """Write the index into `folder` (atomic: built beside it, then renamed in)."""
        target = Path(folder)
        with atomic_dir(target, replace=lambda d: (d / HEADER_FILE).is_file() or not any(d.iterdir())) as tmp:
            self._bm25.save(str(tmp), show_progress=False)
            (tmp / HEADER_FILE).write_text(json.dumps({"format": FORMAT, "version": 1, "count": self.count}),
                                           encoding="utf-8")
        return target

    @classmethod
    def load(cls, folder: str | Path, count: int | None = None) -> LexicalIndex:
        """Read a folder written by `save`; `count` is the number of chunks the index must cover.

        Raises:
            LexicalLoadError: the folder or one of its files is missing or damaged, or it indexes another number
                of chunks than `count`.
        """
        d = Path(folder)
        head_path = d / HEADER_FILE
        fix = "rebuild it (build the retriever or index from its texts again) and save it"
        if not head_path.is_file():
            raise LexicalLoadError(f"{str(d)!r} holds no lexical index: {HEADER_FILE} is missing; {fix}.")
        try:
            head = json.loads(head_path.read_text(encoding="utf-8"))
            if not isinstance(head, dict) or head.get("format") != FORMAT or not isinstance(head.get("count"), int):
                raise ValueError("not a qrag lexical-index header")
            bm25 = _bm25s().BM25.load(str(d), show_progress=False, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - a missing array, bad JSON or a truncated .npy all mean a damaged index
            raise LexicalLoadError(f"the lexical index in {str(d)!r} is damaged ({type(e).__name__}: {e}); {fix}.") from None
        if bm25.scores.get("num_docs") != head["count"] or (count is not None and head["count"] != count):
            raise LexicalLoadError(f"the lexical index in {str(d)!r} covers {bm25.scores.get('num_docs')} chunks "
                                   f"(its header says {head['count']}) but the corpus holds {count}; {fix}.")
        return cls(bm25, head["count"])


@lru_cache(maxsize=1024)
def corpus_lexical(texts: tuple[str, ...]) -> LexicalIndex:
    """The BM25 index of a corpus given as a tuple of texts, built once per process for the corpora seen last
    (validation episodes are searched at every evaluation of a training run)."""
    return LexicalIndex.from_texts(texts)


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
