"""The BM25 indexes of the corpora seen last, built once per process (`corpus_lexical`), bounded in corpora and chunks."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from qrag.training.search.lexical_index import LexicalIndex

CACHE_CORPORA = 1024
"""`corpus_lexical` holds the indexes of at most this many corpora..."""
CACHE_CHUNKS = 500_000
"""...and of at most this many chunks in all (about 100 MB: some 200 bytes of arrays a paragraph-sized chunk, plus
the words; about 350 MB where the indexes hold word pairs, some 500 bytes more a chunk); a larger corpus is not
held."""


class _Build:
    """An index being built: the threads that ask for it meanwhile wait for `done` and take `index`."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.index: LexicalIndex | None = None


class _CorpusCache:
    """The BM25 indexes of the corpora seen last, by their texts: at most `corpora` of them and `chunks` chunks in
    all, least recently used dropped first; thread-safe (an index is built outside the lock, once: a thread that asks
for a corpus being built waits for that build)."""

    def __init__(self, corpora: int, chunks: int) -> None:
        self.corpora, self.chunks = corpora, chunks
        self._held: OrderedDict[tuple[str, ...], LexicalIndex] = OrderedDict()
        self._chunks_held = 0
        self._lock = threading.Lock()
        self._building: dict[tuple[str, ...], _Build] = {}  # the corpora a thread is building the index of

    def get(self, texts: tuple[str, ...], pairs: bool = False) -> LexicalIndex:
        def enough(index: LexicalIndex | None) -> bool:
            return index is not None and (not pairs or index.pairs is not None)

        while True:
            with self._lock:
                index = self._held.get(texts)
                if enough(index):
                    self._held.move_to_end(texts)
                    return index  # type: ignore[return-value]
                build = self._building.get(texts)
                if build is None:  # this thread builds it; others asking meanwhile wait for it
                    build = self._building[texts] = _Build()
                    break
            build.done.wait()
            if enough(build.index):
                return build.index  # type: ignore[return-value]
            # It failed, or was built without the word pairs this caller needs: look again.
        try:
            index = LexicalIndex.from_texts(texts, pairs=pairs)
            build.index = index
            with self._lock:
                if len(texts) <= self.chunks:  # a corpus larger than the whole bound is held by its owner alone
                    held = self._held.get(texts)
                    if held is None:
                        self._chunks_held += len(texts)
                    self._held[texts] = index  # a held index without word pairs is replaced by this one
                    self._held.move_to_end(texts)
                    while len(self._held) > self.corpora or self._chunks_held > self.chunks:
                        _, dropped = self._held.popitem(last=False)
                        self._chunks_held -= len(dropped)
        finally:
            with self._lock:
                del self._building[texts]
            build.done.set()
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
