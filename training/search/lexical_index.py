"""The BM25 index of a corpus, `LexicalIndex`: its versions, its scores and its saved form.

Versions: `added`, `deleted`, `caught_up`; the saved form: NumPy arrays and JSON, never pickled. What it is made of:
`lexical_segments`; the method: `lexical`.

Shape legend: R queries (state rows), N chunks, P postings (a word's occurrences counted once per chunk).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from qrag.training.atomic import atomic_dir
from qrag.training.search.lexical_segments import (
    QUERY_TERMS,
    TERMS,
    _checked_texts,
    _compacted,
    _Segment,
    _stopwords_of,
    _tiered,
    _Vocabulary,
)

K1 = 1.5
B = 0.75
HEADER_FILE = "lexical.json"
WORDS_FILE = "words.json"
ARRAYS = ("terms", "starts", "rows", "tf", "lengths")
FORMAT = "qrag-lexical-index"
VERSION = 2  # 1: bm25s's own files (precomputed scores), read back only by rebuilding from the texts
PAIRS_DIR = "pairs"  # a saved index's word-pair index, when it holds one
SCRATCH = 1 << 22  # query rows × chunks scored at once, bounding the float64 sums to 32 MB
POSTINGS = 1 << 18  # postings read at once, bounding their scratch (some 70 bytes each) to about 20 MB


class LexicalLoadError(ValueError):
    """A saved lexical index is missing, damaged or belongs to another corpus; the message names the file and the fix."""


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
        parts = []  # per segment: it, its first row, and per query word (Qd,) its postings, their end and start
        for seg, first, (lo, hi) in zip(self._segments, self._offsets, spans, strict=False):
            length = (hi - lo)[p_term]  # (Qd,) postings of each query's word in this segment
            ends = np.cumsum(length)  # (Qd,)
            parts.append((seg, first, length, ends, lo[p_term] - (ends - length)))
        # All the postings at once where they fit in a block (one bincount, the fastest sum); else block by block,
        # each added in place. Either way every sum gathers its postings in the same order: the same scores.
        whole = sum(int(ends[-1]) for *_, ends, _ in parts) <= POSTINGS
        flat: np.ndarray | None = None if whole else np.zeros(n_q * self.count, dtype=np.float64)  # (R · N,)
        keys, values = [], []
        for seg, first, length, ends, start in parts:
            total = int(ends[-1])
            for a in range(0, total, POSTINGS):  # the postings in blocks, bounding their scratch
                if total <= POSTINGS:
                    which = np.repeat(np.arange(len(ends)), length)  # (P,) the query word each belongs to
                    at = np.arange(total) + start[which]  # (P,) offsets into the segment's arrays
                else:
                    at = np.arange(a, min(a + POSTINGS, total))  # (P,) positions in this segment's postings
                    which = np.searchsorted(ends, at, side="right")
                    at += start[which]
                rows = seg.rows[at].astype(np.int64)
                tf = seg.tf[at].astype(np.float64)
                norm = K1 * (1 - B + B * seg.lengths[rows] / avgdl)  # (P,)
                key, value = p_row[which] * self.count + first + rows, weight[which] * tf / (tf + norm)  # (P,)
                if flat is None:
                    keys.append(key)
                    values.append(value)
                else:
                    np.add.at(flat, key, value)
        if flat is None:
            if not keys:
                return out
            flat = np.bincount(np.concatenate(keys), weights=np.concatenate(values), minlength=n_q * self.count)
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
