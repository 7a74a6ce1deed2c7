"""The BM25 index of a living `ChunkIndex`: built outside the writer lock, so adds and deletes go on while it builds,
and caught up with them before it is published (`ChunkIndex.with_lexical`, `LexicalIndex.caught_up`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
import torch

from qrag.training.search import lexical, lexical_cache
from qrag.training.search.index import ChunkIndex
from qrag.training.search.lexical import LexicalIndex

TEXTS = ["the river bank of england", "a bank of the river thames", "north west house", "old stone bridge",
         "new york city river", "the city of london bank"]
JOIN_S = 30  # a liveness bound, not a timing: the writes take milliseconds
QUERIES = ["river bank", "bank of england", "stone bridge house", "city of london", "zebra crossing"]


def _index(texts: Sequence[str]) -> ChunkIndex:
    return ChunkIndex(torch.eye(len(texts), 8), list(texts), [f"c{i}" for i in range(len(texts))])


def _same_as_fresh(got: LexicalIndex, texts: Sequence[str]) -> None:
    fresh = LexicalIndex.from_texts(list(texts), pairs=True)
    assert len(got) == len(texts) and got.pairs is not None
    assert torch.allclose(got.scores(QUERIES), fresh.scores(QUERIES), atol=1e-6)
    assert torch.allclose(got.pair_scores(QUERIES), fresh.pair_scores(QUERIES), atol=1e-6)


def test_adds_and_deletes_complete_while_the_bm25_builds_and_the_published_index_covers_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lexical.corpus_lexical.cache_clear()  # type: ignore[attr-defined]
    index = _index(TEXTS)
    started, finish = threading.Event(), threading.Event()
    build = LexicalIndex.from_texts.__func__  # type: ignore[attr-defined]

    def slow_build(cls: type[LexicalIndex], texts: Sequence[str], *, pairs: bool = False) -> LexicalIndex:
        started.set()
        finish.wait()  # the build lasts until the writes below are done (or refused: the test then fails)
        return build(cls, texts, pairs=pairs)

    monkeypatch.setattr(LexicalIndex, "from_texts", classmethod(slow_build))
    builder = threading.Thread(target=lambda: index.with_lexical(pairs=True))
    builder.start()
    try:
        assert started.wait(JOIN_S)
        writes_done = threading.Event()

        def write() -> None:
            index.add_vectors(torch.ones(2, 8), ["a stone bank of the river", "london bridge city"], ["n0", "n1"])
            index.delete(["c1", "c4"])
            index.add_vectors(torch.ones(1, 8), ["the bank of england house"], ["n2"])
            writes_done.set()

        writer = threading.Thread(target=write)
        writer.start()
        writer.join(JOIN_S)  # held by the build's lock before: the writes waited for the whole build
        assert writes_done.is_set(), "the adds and deletes waited for the BM25 build"
        assert index.lexical is None  # not published yet: the build still runs
    finally:
        finish.set()
        builder.join(JOIN_S)
    assert not builder.is_alive()
    published = index.lexical
    assert published is not None and list(index.ids) == ["c0", "c2", "c3", "c5", "n0", "n1", "n2"]
    _same_as_fresh(published, list(index.texts))
    # And it stays in step with later writes, as an index built under the lock does.
    index.delete(["c0"])
    index.add_vectors(torch.ones(1, 8), ["river house"], ["n3"])
    assert index.lexical is not None
    _same_as_fresh(index.lexical, list(index.texts))
    lexical.corpus_lexical.cache_clear()  # type: ignore[attr-defined]


@pytest.mark.parametrize("change", ["adds", "deletes", "both", "readd", "nothing"])
def test_caught_up_scores_as_a_fresh_build_over_the_new_texts(change: str) -> None:
    ids = [f"c{i}" for i in range(len(TEXTS))]
    texts_now, ids_now = list(TEXTS), list(ids)
    if change in ("deletes", "both"):
        for gone in ("c0", "c3", "c5"):
            i = ids_now.index(gone)
            del texts_now[i], ids_now[i]
    if change in ("adds", "both"):
        texts_now += ["bank of the thames", "old york"]
        ids_now += ["n0", "n1"]
    if change == "readd":  # the last chunk deleted and added again under its id with another text
        texts_now[-1], ids_now[-1] = "a river house of stone", "c5"
    built = LexicalIndex.from_texts(TEXTS, pairs=True)
    _same_as_fresh(built.caught_up(TEXTS, ids, texts_now, ids_now), texts_now)


def test_the_vocabulary_is_compacted_once_most_of_its_terms_are_dead() -> None:
    base = LexicalIndex.from_texts([f"word{i} other{i} of the" for i in range(40)] + ["river bank", "old stone"],
                                   pairs=True)
    assert base.memory()["terms"] == 84 + 83 and base.memory()["pairs_terms"] == 83  # words, then pairs
    index = base.deleted(range(30))  # 60 of 84 words dead (71%): compacted
    assert index._vocabulary is not base._vocabulary and len(index._vocabulary.words) == 24
    assert index.pairs is not None and index.pairs._vocabulary is not base.pairs._vocabulary
    assert index.memory()["vocabulary"] < base.memory()["vocabulary"] / 2
    assert index.memory()["pairs_terms"] < base.memory()["pairs_terms"] / 2
    texts = [f"word{i} other{i} of the" for i in range(30, 40)] + ["river bank", "old stone"]
    _same_as(index, texts)
    assert len(base.deleted([0, 1])._vocabulary.words) == 84  # a few dead terms: the vocabulary is shared still
    # The compacted version lives on as any other: adds (known and new words) and deletes.
    index = index.added(["word35 river zebra", "word0 is back"]).deleted([0])
    _same_as(index, [*texts[1:], "word35 river zebra", "word0 is back"])
    assert base.scores(["word3 river"]).shape == (1, 42)  # the version it came from is unchanged
    _same_as(base, [f"word{i} other{i} of the" for i in range(40)] + ["river bank", "old stone"])


def _same_as(got: LexicalIndex, texts: Sequence[str]) -> None:
    queries = ["word35 other33 river", "word0 back zebra", "old stone river bank of the", "word3"]
    fresh = LexicalIndex.from_texts(list(texts), pairs=True)
    assert torch.allclose(got.scores(queries), fresh.scores(queries), atol=1e-6)
    assert torch.allclose(got.pair_scores(queries), fresh.pair_scores(queries), atol=1e-6)


def test_two_first_searches_of_one_corpus_build_its_bm25_once(monkeypatch: pytest.MonkeyPatch) -> None:
    lexical.corpus_lexical.cache_clear()  # type: ignore[attr-defined]
    index, other = _index(TEXTS), _index(TEXTS)  # two indexes of the same texts share one BM25
    calls: list[bool] = []
    asked = threading.Semaphore(0)
    build = LexicalIndex.from_texts.__func__  # type: ignore[attr-defined]
    get = lexical_cache._CACHE.get

    def counted_get(texts: tuple[str, ...], pairs: bool = False) -> LexicalIndex:
        asked.release()
        return get(texts, pairs)

    def slow_build(cls: type[LexicalIndex], texts: Sequence[str], *, pairs: bool = False) -> LexicalIndex:
        calls.append(pairs)
        assert asked.acquire(timeout=JOIN_S) and asked.acquire(timeout=JOIN_S)  # both searches have asked
        return build(cls, texts, pairs=pairs)

    monkeypatch.setattr(lexical_cache._CACHE, "get", counted_get)
    monkeypatch.setattr(LexicalIndex, "from_texts", classmethod(slow_build))
    threads = [threading.Thread(target=lambda ix=ix: ix.with_lexical(pairs=True)) for ix in (index, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    # The second asked while the first build ran: it waited for that build instead of starting its own.
    assert calls == [True] and index.lexical is other.lexical is not None
    monkeypatch.undo()
    _same_as_fresh(index.lexical, TEXTS)
    lexical.corpus_lexical.cache_clear()  # type: ignore[attr-defined]
