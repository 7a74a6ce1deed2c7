"""BM25's terms, vocabulary and segments (METHOD.md §4.5; the index they make up: `lexical_index`).

A text's terms are its words (`_words`, as bm25s reads them) or its adjacent word pairs (`_pairs`; a query's pairs of
two stop words count nothing: `_query_pairs`). A `_Vocabulary` numbers the terms, shared by the versions of one
index until one compacts it (`_compacted`). A `_Segment` holds the term frequencies of a run of consecutive chunks,
by term; a version's segments merge like a binary counter (`_tiered`).

Shape legend: N chunks, U terms of a segment, P postings (a term's occurrences counted once per chunk).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

STOPWORDS = "en"
WORD = re.compile(r"(?u)\b\w\w+\b")  # bm25s's (and scikit-learn's) token pattern
PAIR_WORD = re.compile(r"(?u)\b\w+\b")  # the words word pairs are made of: every run, one letter included
COMPACT_DEAD = 0.5
"""A new version gets a vocabulary of its own live terms once more than this share of the shared one is dead."""


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
        return cls(terms.astype(np.int64, copy=False), starts, rows.astype(np.int32, copy=False),
                   tf.astype(np.int32, copy=False), lengths.astype(np.int32, copy=False))

    def _posting_terms(self) -> np.ndarray:
        return np.repeat(self.terms, np.diff(self.starts))  # (P,)

    def merged(self, after: _Segment) -> _Segment:
        """This segment's chunks followed by `after`'s: `after`'s postings slotted in after this one's of the same
        term (O(P + P_after · log P), no sort of the larger segment)."""
        mine, theirs = self._posting_terms(), after._posting_terms()  # (P,), (P_after,)
        slot = np.searchsorted(mine, theirs, side="right") + np.arange(len(theirs))  # (P_after,) in the merged order
        ours = np.ones(len(mine) + len(theirs), dtype=bool)
        ours[slot] = False
        # Each array written once in its own dtype (terms int64, rows and tf int32): a merge of a large index
        # holds no int64 copy of its rows and counts.
        term = np.empty(len(ours), dtype=np.int64)
        term[ours], term[slot] = mine, theirs
        del mine, theirs
        rows = np.empty(len(ours), dtype=np.int32)
        rows[ours], rows[slot] = self.rows, after.rows + np.int32(self.size)
        tf = np.empty(len(ours), dtype=np.int32)
        tf[ours], tf[slot] = self.tf, after.tf
        del ours, slot
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
