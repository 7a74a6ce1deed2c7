"""Lexical evidence (METHOD.md §4.5): BM25 over the chunks of a corpus, and reciprocal-rank fusion.

Shape legend: R queries (state rows), N chunks, P postings (a word's occurrences counted once per chunk).

A model whose `HopSettings.lexical_weight` ω is above 0 ranks the chunks at every hop by

    score(s, c) = Q(s, c) + ω · BM25(text(s), c) / max_{c' available} BM25(text(s), c'),

text(s) being the state's text (the question and the passages taken so far), so a passage that shares rare words
with the question, or with a passage already taken (the bridge entity of a two-hop question), climbs the
ranking. The Q-value alone still drives the stop rule. BM25 is `bm25s`'s Lucene variant, k1 1.5, b 0.75, over
`bm25s`'s words (lower-cased runs of two or more word characters, English stop words dropped), the same scores
the `bm25` and `hybrid` baselines of `qrag-eval` rank by:

    BM25(q, c) = Σ_{w in q} idf(w) · tf(w, c) / (tf(w, c) + k1 · (1 − b + b · |c| / avgdl)),
    idf(w) = ln(1 + (N − df(w) + 0.5) / (df(w) + 0.5)),

a word repeated in the query counting once per repetition, |c| the chunk's words, avgdl their mean over the N
chunks (chunks without a word count in N and avgdl, and score 0). An index built with `pairs` holds a second one
over adjacent word pairs (`_pairs`: stop words and one-letter words kept; `pair_scores`, where a query's pairs
made of two such words count nothing: `_query_pairs`), which a model with a
`HopSettings.pair_weight` ρ adds to its evidence, ρ × the question's pairs' BM25 scaled the same way (METHOD.md
§4.5).
`reciprocal_rank_fusion` is the fusion
LangChain's `EnsembleRetriever` and LlamaIndex's `QueryFusionRetriever` apply to BM25 and a vector store:
Σ_i w_i / (c + rank_i), c = 60.

A `LexicalIndex` is immutable and made of segments: each holds the term frequencies of a run of consecutive chunks,
and the document frequencies, N and avgdl are read off all of them at query time, so `added` and `deleted` give the
scores a fresh build over the resulting texts gives, while readers of the version they started from see it
unchanged. `added` indexes only the new texts (a new segment; segments merge like a binary counter, so a version
holds O(log N) of them and a chunk is merged O(log N) times in all); `deleted` drops rows of the segments that hold
them, with no text read again. Saved as NumPy arrays (never pickled) and JSON.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from qrag.training.atomic import atomic_dir

__all__ = ["CACHE_CHUNKS", "CACHE_CORPORA", "RRF_C", "LexicalIndex", "LexicalLoadError", "corpus_lexical",
           "forget_corpus", "lexical_evidence", "reciprocal_rank_fusion", "state_text"]

RRF_C = 60
"""The c of reciprocal-rank fusion (LangChain's and LlamaIndex's default)."""
K1 = 1.5
B = 0.75
HEADER_FILE = "lexical.json"
WORDS_FILE = "words.json"
ARRAYS = ("terms", "starts", "rows", "tf", "lengths")
FORMAT = "qrag-lexical-index"
VERSION = 2  # 1: bm25s's own files (precomputed scores), read back only by rebuilding from the texts
STOPWORDS = "en"
WORD = re.compile(r"(?u)\b\w\w+\b")  # bm25s's (and scikit-learn's) token pattern
PAIR_WORD = re.compile(r"(?u)\b\w+\b")  # the words word pairs are made of: every run, one letter included
PAIRS_DIR = "pairs"  # a saved index's word-pair index, when it holds one
COMPACT_DEAD = 0.5
"""A new version gets a vocabulary of its own live terms once more than this share of the shared one is dead."""
SCRATCH = 1 << 22  # query rows × chunks scored at once, bounding the float64 sums to 32 MB
POSTINGS = 1 << 18  # postings read at once, bounding their scratch (some 70 bytes each) to about 20 MB
CACHE_CORPORA = 1024
"""`corpus_lexical` holds the indexes of at most this many corpora..."""
CACHE_CHUNKS = 500_000
"""...and of at most this many chunks in all (about 100 MB: some 200 bytes of arrays a paragraph-sized chunk, plus
the words; about 350 MB where the indexes hold word pairs, some 500 bytes more a chunk); a larger corpus is not
held."""


class LexicalLoadError(ValueError):
    """A saved lexical index is missing, damaged or belongs to another corpus; the message names the file and the fix."""


@lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    try:
        from bm25s.stopwords import STOPWORDS_EN
    except ImportError as e:  # a core dependency; an environment built without it gets the command
        raise ImportError("lexical evidence needs `bm25s`: pip install 'bm25s>=0.2'.") from e
    return frozenset(STOPWORDS_EN)


def _words(text: str) -> list[str]:
    """The words BM25 reads in `text`, in order, as `bm25s.tokenize(..., stopwords='en')` gives them."""
    stop = _stopwords()
    return [w for w in WORD.findall(text.lower()) if w not in stop]


def _pairs(text: str) -> list[str]:
    """The word pairs BM25 reads in `text`: each two adjacent lower-cased runs of word characters, stop words and
    one-letter words kept ("the bank of england" -> "the bank", "bank of", "of england")."""
    words = PAIR_WORD.findall(text.lower())
    return [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]


def _query_pairs(text: str) -> list[str]:
    """The word pairs of a query that count: `_pairs`, less those neither of whose words the word index reads (a
    stop word or a one-letter word: "of the", "i was"). Such a pair says nothing of the question, and the scaling by
    the best chunk would otherwise hand the chunks richest in "of the" the whole pair evidence whenever no pair
    that names something occurs (METHOD.md §4.5). Chunks keep every pair: the saved format is unchanged."""
    words = PAIR_WORD.findall(text.lower())
    stop = _stopwords()
    read = [len(w) > 1 and w not in stop for w in words]  # the words `_words` keeps
    return [f"{a} {b}" for a, b, ra, rb in zip(words, words[1:], read, read[1:], strict=False) if ra or rb]


TERMS = {"words": _words, "pairs": _pairs}
"""What an index's terms are, by name: its header records it."""
QUERY_TERMS = {"words": _words, "pairs": _query_pairs}
"""The terms a query of an index of these terms is read as."""


def _stopwords_of(terms: object) -> str | None:
    """The stop words an index of these terms drops, as its header names them (word pairs keep stop words)."""
    return STOPWORDS if terms == "words" else None


def _checked_texts(texts: Iterable[str], what: str) -> list[str]:
    if isinstance(texts, str):
        raise ValueError(f"{what} must be a sequence of texts, got one string {texts[:40]!r}; wrap it in a list.")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ValueError(f"{what}[{i}] is {type(t).__name__} {t!r:.60}, not a text; pass strings.")
    return out


class _Vocabulary:
    """Words to term ids, shared by an index and every version made from it. Append-only: a word keeps its id
    for ever, so a version ignores the ids that later versions add (no posting of its own carries them)."""

    def __init__(self, words: Sequence[str] = ()) -> None:
        self.words: list[str] = list(words)
        self.ids: dict[str, int] = {w: i for i, w in enumerate(self.words)}
        self._lock = threading.Lock()  # writers building versions from one base at once

    def add(self, docs: Sequence[Sequence[str]]) -> list[list[int]]:
        """The term ids of each document's words, giving new words the next ids."""
        with self._lock:
            ids, words = self.ids, self.words
            out = []
            for doc in docs:
                row = []
                for w in doc:
                    i = ids.get(w)
                    if i is None:
                        i = len(words)
                        words.append(w)
                        ids[w] = i
                    row.append(i)
                out.append(row)
            return out


def _frozen(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.setflags(write=False)


@dataclass(frozen=True)
class _Segment:
    """The term frequencies of a run of consecutive chunks, by term: chunk `rows[starts[j]:starts[j+1]]` (local rows,
    ascending) holds term `terms[j]` `tf[...]` times. Read-only arrays: versions share segments."""

    terms: np.ndarray  # (U,) int64 global term ids, ascending
    starts: np.ndarray  # (U + 1,) int64 offsets into rows and tf
    rows: np.ndarray  # (P,) int32
    tf: np.ndarray  # (P,) int32
    lengths: np.ndarray  # (n,) int32 words of each chunk
    words: int = field(init=False)  # their sum, kept so that a new version costs nothing per old chunk

    def __post_init__(self) -> None:
        _frozen(self.terms, self.starts, self.rows, self.tf, self.lengths)
        object.__setattr__(self, "words", int(self.lengths.sum(dtype=np.int64)))

    @property
    def size(self) -> int:
        return len(self.lengths)

    @classmethod
    def of_ids(cls, docs: Sequence[Sequence[int]]) -> _Segment:
        """The segment of documents given as term ids (repeats counted)."""
        n = len(docs)
        lengths = np.fromiter(map(len, docs), dtype=np.int64, count=n)  # (n,)
        term = np.fromiter(itertools.chain.from_iterable(docs), dtype=np.int64, count=int(lengths.sum()))  # (T,)
        doc = np.repeat(np.arange(n, dtype=np.int64), lengths)  # (T,)
        keys, tf = np.unique(term * max(n, 1) + doc, return_counts=True)  # (P,) sorted by term, then chunk
        return cls._of_sorted(keys // max(n, 1), keys % max(n, 1), tf, lengths)

    @classmethod
    def _of_sorted(cls, term: np.ndarray, rows: np.ndarray, tf: np.ndarray, lengths: np.ndarray) -> _Segment:
        """From postings sorted by term, then row (O(P): no sort)."""
        first = np.flatnonzero(np.diff(term, prepend=-1))  # (U,) each term's first posting
        terms, starts = term[first], np.append(first, len(term)).astype(np.int64)
        return cls(terms.astype(np.int64), starts, rows.astype(np.int32), tf.astype(np.int32),
                   lengths.astype(np.int32))

    def _posting_terms(self) -> np.ndarray:
        return np.repeat(self.terms, np.diff(self.starts))  # (P,)

    def merged(self, after: _Segment) -> _Segment:
        """This segment's chunks followed by `after`'s: `after`'s postings slotted in after this one's of the same
        term (O(P + P_after · log P), no sort of the larger segment)."""
        mine, theirs = self._posting_terms(), after._posting_terms()  # (P,), (P_after,)
        slot = np.searchsorted(mine, theirs, side="right") + np.arange(len(theirs))  # (P_after,) in the merged order
        ours = np.ones(len(mine) + len(theirs), dtype=bool)
        ours[slot] = False
        merged = []
        for a, b in ((mine, theirs), (self.rows, after.rows.astype(np.int64) + self.size), (self.tf, after.tf)):
            out = np.empty(len(ours), dtype=np.int64)
            out[ours], out[slot] = a, b
            merged.append(out)
        term, rows, tf = merged
        return _Segment._of_sorted(term, rows, tf, np.concatenate([self.lengths, after.lengths]))

    def without(self, drop: np.ndarray) -> _Segment:
        """The segment without local rows `drop` (ascending, distinct); the others keep their order."""
        keep = np.ones(self.size, dtype=bool)
        keep[drop] = False
        renumber = np.cumsum(keep) - 1  # (n,) new row of each kept row
        kept = keep[self.rows]  # (P,)
        term = self._posting_terms()[kept]
        return _Segment._of_sorted(term, renumber[self.rows[kept]], self.tf[kept], self.lengths[keep])

    def postings(self, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(U,) start and end offsets of each of the (U,) ascending `terms`' postings (equal where absent)."""
        pos = np.searchsorted(self.terms, terms)  # (U,)
        found = pos < len(self.terms)
        found[found] = self.terms[pos[found]] == terms[found]
        lo = np.where(found, self.starts[np.minimum(pos, len(self.terms))], 0)
        hi = np.where(found, self.starts[np.minimum(pos + 1, len(self.terms))], 0)
        return lo, hi


def _tiered(segments: Iterable[_Segment]) -> tuple[_Segment, ...]:
    """The segments, adjacent ones merged until each is at least twice the size of the one after it (a binary
    counter: O(log N) segments; a chunk's segment grows by at least half at each merge it takes part in)."""
    out: list[_Segment] = []
    for s in segments:
        if s.size == 0:
            continue
        out.append(s)
        while len(out) >= 2 and out[-2].size < 2 * out[-1].size:
            out[-2:] = [out[-2].merged(out[-1])]
    return tuple(out)


def _compacted(segments: tuple[_Segment, ...], vocabulary: _Vocabulary) -> tuple[tuple[_Segment, ...], _Vocabulary]:
    """The segments and vocabulary of a new version: as they are, or, once more than `COMPACT_DEAD` of the
    vocabulary's terms are dead (no posting of these segments carries them: deleted chunks' words, words of versions
    made from the same base and dropped), a vocabulary of the live terms alone with the segments' term ids renumbered
    in the same order (their postings shared, not copied: O(V) work, V the terms). Dead terms are counted surely:
    the segments' terms, counted once per segment, are fewer than the share left."""
    held = sum(len(s.terms) for s in segments)  # (≥ the live terms)
    if held >= (1 - COMPACT_DEAD) * len(vocabulary.words):
        return segments, vocabulary
    used = np.unique(np.concatenate([s.terms for s in segments] or [np.zeros(0, np.int64)]))  # (V',) ascending
    with vocabulary._lock:
        words = [vocabulary.words[i] for i in used.tolist()]
    renumbered = tuple(_Segment(np.searchsorted(used, s.terms).astype(np.int64), s.starts, s.rows, s.tf, s.lengths)
                       for s in segments)  # ascending ids stay ascending
    return renumbered, _Vocabulary(words)


class LexicalIndex:
    """BM25 over a corpus's chunk texts, scoring every chunk for a query; immutable (`added` and `deleted` return
    new versions, sharing this one's segments).

    Example:
        >>> index = LexicalIndex.from_texts(["The cat sat on the mat.", "Dogs bark.", "A cat is an animal."])
        >>> [round(float(s), 3) for s in index.scores(["cat animal"])[0]]
        [0.167, 0.0, 0.62]
        >>> grown = index.added(["A lion is a cat."])  # index itself is unchanged
        >>> [round(float(s), 3) for s in grown.deleted([1]).scores(["cat animal"])[0]]
        [0.047, 0.476, 0.057]
    """

    def __init__(self, segments: Sequence[_Segment], vocabulary: _Vocabulary, *, terms: str = "words",
                 pairs: LexicalIndex | None = None) -> None:
        self._segments = tuple(segments)
        self._vocabulary = vocabulary
        self.terms = terms
        self._terms_of = TERMS[terms]
        self._query_terms_of = QUERY_TERMS[terms]
        self.pairs = pairs
        """BM25 over the same chunks' word pairs (`_pairs`), kept in step with this index; None: not built."""
        self._offsets = np.cumsum([0, *(s.size for s in self._segments)])  # (S + 1,) first row of each segment
        self.count = int(self._offsets[-1])
        self._total_words = sum(s.words for s in self._segments)

    @classmethod
    def from_texts(cls, texts: Sequence[str], *, pairs: bool = False) -> LexicalIndex:
        """Index `texts` (one document per chunk, in the corpus's order; a text without a word scores 0); with
        `pairs`, their word pairs too (`pair_scores`: the evidence of models with a pair weight, METHOD.md §4.5).

        Raises:
            ValueError: no text, or one that is not a string (named by its index).
        """
        texts = _checked_texts(texts, "texts")
        if not texts:
            raise ValueError("a lexical index needs at least one text.")
        return cls._built(texts, "words", cls._built(texts, "pairs", None) if pairs else None)

    @classmethod
    def _built(cls, texts: Sequence[str], terms: str, pairs: LexicalIndex | None) -> LexicalIndex:
        vocabulary = _Vocabulary()
        segment = _Segment.of_ids(vocabulary.add([TERMS[terms](t) for t in texts]))
        return cls(_tiered([segment]), vocabulary, terms=terms, pairs=pairs)

    def __len__(self) -> int:
        return self.count

    @property
    def segments(self) -> int:
        """How many segments this version holds (O(log N))."""
        return len(self._segments)

    def memory(self) -> dict[str, int]:
        """Bytes this version holds: `arrays` its segments' NumPy arrays, `vocabulary` its vocabulary's words and
        their ids as Python holds them (shared with the versions made from the same base until one compacts it),
        `terms` the vocabulary's size, each with the word-pair index's added in (`pairs_arrays`, ... alone too)."""
        words = self._vocabulary.words
        vocab = (sys.getsizeof(words) + sys.getsizeof(self._vocabulary.ids) + sum(map(sys.getsizeof, words))
                 + len(words) * sys.getsizeof(1 << 20))  # the list, the dict, the strings and the ids' ints
        out = {"arrays": sum(a.nbytes for s in self._segments for a in (s.terms, s.starts, s.rows, s.tf, s.lengths)),
               "vocabulary": vocab, "terms": len(words)}
        if self.pairs is not None:
            pairs = self.pairs.memory()
            out |= {f"pairs_{k}": v for k, v in pairs.items()}
            out |= {k: out[k] + pairs[k] for k in pairs}
        return out

    # ------------------------------------------------------------------ versions
    def added(self, texts: Sequence[str]) -> LexicalIndex:
        """A new index over this one's texts followed by `texts`; this one is unchanged. Costs the new texts'
        words plus amortised merges (O(len(texts) · log N)).

        Raises:
            ValueError: a text that is not a string (named by its index).
        """
        texts = _checked_texts(texts, "texts")
        if not texts:
            return self
        new = _Segment.of_ids(self._vocabulary.add([self._terms_of(t) for t in texts]))
        return LexicalIndex(*_compacted(_tiered([*self._segments, new]), self._vocabulary), terms=self.terms,
                            pairs=None if self.pairs is None else self.pairs.added(texts))

    def deleted(self, rows: Iterable[int]) -> LexicalIndex:
        """A new index without chunk rows `rows` (rows of this version); the others keep their order and this
        one is unchanged. No text is read again: O(N) array work at most.

        Raises:
            ValueError: a row that is not an integer in [0, len(self)).
        """
        rows = rows.tolist() if isinstance(rows, np.ndarray | torch.Tensor) else list(rows)
        bad = [r for r in rows if isinstance(r, bool) or not isinstance(r, int | np.integer)
               or not 0 <= r < self.count]
        if bad:
            raise ValueError(f"cannot delete row {bad[0]!r}: rows are integers in [0, {self.count}) (the chunks' "
                             "positions in this index).")
        drop = np.unique(np.asarray(rows, dtype=np.int64))
        if drop.size == 0:
            return self
        cut = np.searchsorted(drop, self._offsets)  # (S + 1,) the rows to drop of each segment
        kept = [s if cut[i] == cut[i + 1] else s.without(drop[cut[i]:cut[i + 1]] - self._offsets[i])
                for i, s in enumerate(self._segments)]
        return LexicalIndex(*_compacted(_tiered(kept), self._vocabulary), terms=self.terms,
                            pairs=None if self.pairs is None else self.pairs.deleted(drop.tolist()))

    def caught_up(self, texts_then: Sequence[str], ids_then: Sequence[str], texts_now: Sequence[str],
                  ids_now: Sequence[str]) -> LexicalIndex:
        """This index, built over the chunks `ids_then` / `texts_then`, brought to the chunks `ids_now` /
        `texts_now`, a later version of the same corpus: its surviving chunks in their order, then the chunks added
        since (what deletes and adds leave). The chunks gone are deleted and the new ones added: the scores of a
        fresh build over `texts_now`, at the cost of the change (O(N) where chunks were deleted)."""
        then, now = list(ids_then), list(ids_now)
        then_texts, now_texts = list(texts_then), list(texts_now)
        n = len(then)
        if now[:n] == then and now_texts[:n] == then_texts:
            return self.added(now_texts[n:])  # adds only
        where = {cid: r for r, cid in enumerate(then)}
        kept: list[int] = []
        for cid, text in zip(now, now_texts, strict=True):
            r = where.get(cid)
            if r is None or (kept and r <= kept[-1]) or then_texts[r] != text:
                break  # the first chunk added since: every later one was added too
            kept.append(r)
        gone = np.setdiff1d(np.arange(n), np.asarray(kept, dtype=np.int64))
        return self.deleted(gone.tolist()).added(now_texts[len(kept):])

    # ------------------------------------------------------------------ scoring
    def scores(self, queries: Sequence[str]) -> torch.Tensor:
        """(R, N) BM25 score of every chunk for each query (0 where a query shares no word with a chunk)."""
        queries = _checked_texts(queries, "queries")
        step = max(1, SCRATCH // max(self.count, 1))
        if len(queries) <= step:
            return torch.from_numpy(self._scores(queries))
        out = np.zeros((len(queries), self.count), dtype=np.float32)  # (R, N)
        for r in range(0, len(queries), step):
            out[r:r + step] = self._scores(queries[r:r + step])
        return torch.from_numpy(out)

    def pair_scores(self, queries: Sequence[str]) -> torch.Tensor:
        """(R, N) BM25 score of every chunk for each query's word pairs (`_pairs`; the same BM25, k1 and b).

        Raises:
            ValueError: the index was built without word pairs.
        """
        if self.pairs is None:
            raise ValueError("this lexical index holds no word pairs: build it with LexicalIndex.from_texts(texts, "
                             "pairs=True) (ChunkIndex.with_lexical(pairs=True) does).")
        return self.pairs.scores(queries)

    def top(self, queries: Sequence[str], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, K) best BM25 scores and their chunk rows per query, best first, K = min(k, N); equal scores come
        in row order (the lower row first), so a query that shares no word with the corpus gets rows 0 … K−1."""
        queries = _checked_texts(queries, "queries")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}.")
        k = min(int(k), self.count)
        best = np.zeros((len(queries), k), dtype=np.float32)  # (R, K)
        rows = np.zeros((len(queries), k), dtype=np.int64)  # (R, K)
        step = max(1, SCRATCH // max(self.count, 1))
        for r0 in range(0, len(queries), step):
            block = self._scores(queries[r0:r0 + step])  # (r, N)
            for i, s in enumerate(block):
                rows[r0 + i] = _best_rows(s, k)
                best[r0 + i] = s[rows[r0 + i]]
        return torch.from_numpy(best), torch.from_numpy(rows)

    def _scores(self, queries: Sequence[str]) -> np.ndarray:
        """(R, N) float32 BM25 scores of a block of queries, summed in float64."""
        n_q = len(queries)
        out = np.zeros((n_q, self.count), dtype=np.float32)
        if self._total_words == 0 or n_q == 0:
            return out  # no chunk holds a word
        ids = self._vocabulary.ids
        known = [(r, i) for r, q in enumerate(queries) for i in map(ids.get, self._query_terms_of(q)) if i is not None]
        if not known:
            return out
        q_row, q_term = np.asarray(known, dtype=np.int64).T  # (Q,) each: one per known word of a query
        terms, term_of = np.unique(q_term, return_inverse=True)  # (U,) and (Q,)
        pair, times = np.unique(q_row * len(terms) + term_of, return_counts=True)  # a repeated word counts again
        p_row, p_term = pair // len(terms), pair % len(terms)  # (Qd,) each
        spans = [s.postings(terms) for s in self._segments]  # per segment (U,) starts and ends
        df = sum((hi - lo for lo, hi in spans), np.zeros(len(terms), dtype=np.int64))  # (U,)
        idf = np.log1p((self.count - df + 0.5) / (df + 0.5))  # (U,) Lucene's, as bm25s
        weight = times * idf[p_term]  # (Qd,)
        avgdl = self._total_words / self.count
        flat = np.zeros(n_q * self.count, dtype=np.float64)  # (R · N,) summed in place, one posting after the other
        for seg, first, (lo, hi) in zip(self._segments, self._offsets, spans, strict=False):
            length = (hi - lo)[p_term]  # (Qd,) postings of each query's word in this segment
            ends = np.cumsum(length)  # (Qd,)
            start = lo[p_term] - (ends - length)  # (Qd,) segment offset minus position, per query word
            for a in range(0, int(ends[-1]), POSTINGS):  # the postings in blocks, bounding their scratch
                at = np.arange(a, min(a + POSTINGS, int(ends[-1])))  # (P,) positions in this segment's postings
                which = np.searchsorted(ends, at, side="right")  # (P,) the query word each belongs to
                at += start[which]  # (P,) offsets into the segment's arrays
                rows = seg.rows[at].astype(np.int64)
                tf = seg.tf[at].astype(np.float64)
                norm = K1 * (1 - B + B * seg.lengths[rows] / avgdl)  # (P,)
                # Each sum gathers its postings in the order they come, as one pass over all of them would.
                np.add.at(flat, p_row[which] * self.count + first + rows, weight[which] * tf / (tf + norm))
        return flat.astype(np.float32).reshape(n_q, self.count)

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        """Write the index into `folder` (atomic: built beside it, then renamed in): its segments' arrays (.npy)
        with their terms renumbered 0 … V−1 in `words.json`, a header, and the word-pair index's own in `pairs/`."""
        target = Path(folder)
        with atomic_dir(target, replace=lambda d: (d / HEADER_FILE).is_file() or not any(d.iterdir())) as tmp:
            self._write(tmp)
        return target

    def _write(self, tmp: Path) -> None:
        used = np.unique(np.concatenate([s.terms for s in self._segments] or [np.zeros(0, np.int64)]))  # (V,)
        words = [self._vocabulary.words[i] for i in used.tolist()]
        arrays = {"terms": [np.searchsorted(used, s.terms) for s in self._segments],  # ascending stays ascending
                  "starts": [s.starts for s in self._segments], "rows": [s.rows for s in self._segments],
                  "tf": [s.tf for s in self._segments], "lengths": [s.lengths for s in self._segments]}
        head = {"format": FORMAT, "version": VERSION, "count": self.count, "k1": K1, "b": B,
                "stopwords": _stopwords_of(self.terms), "terms": self.terms, "pairs": self.pairs is not None,
                "words": len(words), "segments": [[s.size, len(s.terms), len(s.rows)] for s in self._segments]}
        for name, parts in arrays.items():
            dtype = np.int32 if name in ("rows", "tf", "lengths") else np.int64
            np.save(tmp / f"{name}.npy", np.concatenate([*parts, np.zeros(0, dtype)]).astype(dtype), allow_pickle=False)
        (tmp / WORDS_FILE).write_text(json.dumps(words, ensure_ascii=False), encoding="utf-8")
        if self.pairs is not None:
            (tmp / PAIRS_DIR).mkdir()
            self.pairs._write(tmp / PAIRS_DIR)
        (tmp / HEADER_FILE).write_text(json.dumps(head), encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path, count: int | None = None, texts: Sequence[str] | None = None) -> LexicalIndex:
        """Read a folder written by `save`; `count` is the number of chunks the index must cover. A folder saved
        by an earlier qrag (bm25s's files, header version 1) is rebuilt from `texts`, the corpus's texts.

        Raises:
            LexicalLoadError: the folder or one of its files is missing or damaged, it indexes another number
                of chunks than `count` (or `texts`), or it is an earlier qrag's and `texts` is not given.
        """
        d = Path(folder)
        head_path = d / HEADER_FILE
        fix = "rebuild it (build the retriever or index from its texts again) and save it"
        if texts is not None:
            texts = _checked_texts(texts, "texts")
            count = len(texts) if count is None else count
        if not head_path.is_file():
            raise LexicalLoadError(f"{str(d)!r} holds no lexical index: {HEADER_FILE} is missing; {fix}.")
        try:
            head = json.loads(head_path.read_text(encoding="utf-8"))
            if not isinstance(head, dict) or head.get("format") != FORMAT or not isinstance(head.get("count"), int):
                raise ValueError("not a qrag lexical-index header")
            if head.get("version") == 1:
                index = None
            else:
                index = cls._read(d, head)
        except Exception as e:  # noqa: BLE001 - a missing array, bad JSON or a truncated .npy all mean a damaged index
            raise LexicalLoadError(f"the lexical index in {str(d)!r} is damaged ({type(e).__name__}: {e}); {fix}.") from None
        if count is not None and head["count"] != count:
            raise LexicalLoadError(f"the lexical index in {str(d)!r} covers {head['count']} chunks but the corpus "
                                   f"holds {count}; {fix}.")
        if index is not None:
            return index
        if texts is None:
            raise LexicalLoadError(f"the lexical index in {str(d)!r} was saved by an earlier qrag (bm25s's files, "
                                   f"version 1), which holds no term frequencies: load it with its corpus's texts "
                                   f"(LexicalIndex.load(folder, texts=...)) to rebuild it, or {fix}.")
        return cls.from_texts(texts)

    @classmethod
    def _read(cls, d: Path, head: dict[str, object]) -> LexicalIndex:
        """The index of a version-2 folder, every array checked against the header (ValueError where one is off);
        a folder saved before word pairs has no `terms` (words) and no `pairs`."""
        terms = head.get("terms", "words")
        if head.get("version") != VERSION or head.get("k1") != K1 or head.get("b") != B or terms not in TERMS \
                or head.get("stopwords") != _stopwords_of(terms):
            raise ValueError(f"unknown version, terms or BM25 settings {head!r:.200}")
        pairs = None
        if head.get("pairs", False):
            sub = json.loads((d / PAIRS_DIR / HEADER_FILE).read_text(encoding="utf-8"))
            if not isinstance(sub, dict) or sub.get("terms") != "pairs" or sub.get("count") != head["count"] \
                    or sub.get("pairs", False):
                raise ValueError(f"{PAIRS_DIR}/{HEADER_FILE} is not a word-pair index of the same chunks")
            pairs = cls._read(d / PAIRS_DIR, sub)
        words = json.loads((d / WORDS_FILE).read_text(encoding="utf-8"))
        if not isinstance(words, list) or len(words) != head.get("words") or len(set(words)) != len(words):
            raise ValueError(f"{WORDS_FILE} does not hold the header's {head.get('words')} distinct words")
        a = {name: np.load(d / f"{name}.npy", allow_pickle=False) for name in ARRAYS}
        sizes = np.asarray(head.get("segments"), dtype=np.int64).reshape(-1, 3)  # (S, 3) chunks, terms, postings
        want = {"terms": sizes[:, 1].sum(), "starts": (sizes[:, 1] + 1).sum(), "rows": sizes[:, 2].sum(),
                "tf": sizes[:, 2].sum(), "lengths": sizes[:, 0].sum()}
        if any(a[k].ndim != 1 or a[k].dtype.kind not in "iu" or len(a[k]) != want[k] for k in ARRAYS) \
                or sizes[:, 0].sum() != head["count"]:
            raise ValueError("array lengths differ from the header's segments")
        segments = []
        at = np.zeros(4, dtype=np.int64)  # offsets into terms, starts, rows and tf, lengths
        for n, u, p in sizes.tolist():
            ids, starts = a["terms"][at[0]:at[0] + u], a["starts"][at[1]:at[1] + u + 1]
            rows, tf, lengths = a["rows"][at[2]:at[2] + p], a["tf"][at[2]:at[2] + p], a["lengths"][at[3]:at[3] + n]
            at += (u, u + 1, p, n)
            if (np.any(np.diff(ids) <= 0) or (u and not 0 <= ids[0] <= ids[-1] < len(words))
                    or starts[0] != 0 or starts[-1] != p or np.any(np.diff(starts) <= 0)
                    or np.any((rows < 0) | (rows >= n)) or np.any(tf < 1) or np.any(lengths < 0)):
                raise ValueError("a segment's arrays are out of range")
            segments.append(_Segment(ids.astype(np.int64), starts.astype(np.int64), rows.astype(np.int32),
                                     tf.astype(np.int32), lengths.astype(np.int32)))
        return cls(segments, _Vocabulary(words), terms=str(terms), pairs=pairs)


def _best_rows(s: np.ndarray, k: int) -> np.ndarray:
    """(K,) rows of the k best of the (N,) scores `s`, best first, equal scores in row order."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if k < s.size:
        kth = np.partition(s, s.size - k)[s.size - k]  # the k-th best score
        above = np.flatnonzero(s > kth)
        rows = np.concatenate([above, np.flatnonzero(s == kth)[:k - above.size]])
    else:
        rows = np.arange(s.size)
    return rows[np.lexsort((rows, -s[rows]))]


# ---------------------------------------------------------------------- per-corpus cache
class _CorpusCache:
    """The BM25 indexes of the corpora seen last, by their texts: at most `corpora` of them and `chunks` chunks in
    all, least recently used dropped first; thread-safe (an index is built outside the lock)."""

    def __init__(self, corpora: int, chunks: int) -> None:
        self.corpora, self.chunks = corpora, chunks
        self._held: OrderedDict[tuple[str, ...], LexicalIndex] = OrderedDict()
        self._chunks_held = 0
        self._lock = threading.Lock()

    def get(self, texts: tuple[str, ...], pairs: bool = False) -> LexicalIndex:
        def enough(index: LexicalIndex | None) -> bool:
            return index is not None and (not pairs or index.pairs is not None)

        with self._lock:
            index = self._held.get(texts)
            if enough(index):
                self._held.move_to_end(texts)
                return index  # type: ignore[return-value]
        index = LexicalIndex.from_texts(texts, pairs=pairs)
        if len(texts) > self.chunks:
            return index  # larger than the whole bound: its owner holds it
        with self._lock:
            held = self._held.get(texts)
            if enough(held):  # another thread built it meanwhile: one index per corpus
                self._held.move_to_end(texts)
                return held  # type: ignore[return-value]
            if held is None:
                self._chunks_held += len(texts)
            self._held[texts] = index  # a held index without word pairs is replaced by this one, which has them
            self._held.move_to_end(texts)
            while len(self._held) > self.corpora or self._chunks_held > self.chunks:
                _, dropped = self._held.popitem(last=False)
                self._chunks_held -= len(dropped)
        return index

    def forget(self, texts: tuple[str, ...]) -> None:
        with self._lock:
            dropped = self._held.pop(texts, None)
            if dropped is not None:
                self._chunks_held -= len(dropped)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._chunks_held = 0

    def held(self) -> tuple[int, int]:
        """How many corpora and chunks the cache holds."""
        with self._lock:
            return len(self._held), self._chunks_held


_CACHE = _CorpusCache(CACHE_CORPORA, CACHE_CHUNKS)


def corpus_lexical(texts: Sequence[str], *, pairs: bool = False) -> LexicalIndex:
    """The BM25 index of a corpus given by its texts (with `pairs`, one that holds the word pairs too), built once
    per process for the corpora seen last (validation episodes are searched at every evaluation of a training run).
    The cache holds at most `CACHE_CORPORA` corpora and `CACHE_CHUNKS` chunks in all, the least recently used dropped
    first; a corpus above `CACHE_CHUNKS` chunks is built and not held. Thread-safe."""
    return _CACHE.get(tuple(texts), pairs)


corpus_lexical.cache_clear = _CACHE.clear  # type: ignore[attr-defined]  # empties the cache, as lru_cache's did


def forget_corpus(texts: Sequence[str]) -> None:
    """Drop the cache's index of the corpus given by its texts (an index whose corpus was replaced calls it, so
    only its own references keep that BM25 alive); nothing happens when the cache does not hold it."""
    _CACHE.forget(tuple(texts))


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
