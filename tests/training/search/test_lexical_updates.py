"""The living BM25 index: `added` and `deleted` versions score exactly as a fresh build over their texts (hand-computed,
and against bm25s itself, words and word pairs, on the project's own pages after random adds and deletes), leave the
version they came from unchanged for its readers, save and load (an index saved in bm25s's format rebuilt from its
texts), and the per-corpus cache stays within its bounds and forgets a replaced corpus."""

from __future__ import annotations

import gc
import json
import math
import random
import re
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from qrag.training.search import lexical_cache, lexical_index, lexical_segments
from qrag.training.search.lexical import LexicalIndex, LexicalLoadError, corpus_lexical, forget_corpus

OLD_FORMAT = Path(__file__).parents[2] / "fixtures" / "lexical_v1"

# Lucene's BM25 as bm25s computes it, k1 1.5, b 0.75: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
# tf component tf / (tf + k1 · (1 - b + b · dl / avgdl)). The corpus: d0 = apple apple banana (dl 3),
# d1 = banana cherry (dl 2), d2 = cherry (dl 1; 'the' is a stop word): N = 3, avgdl = 6 / 3 = 2.
HAND = ["Apple apple banana.", "banana, cherry", "the cherry"]
IDF_1 = math.log(1 + 2.5 / 1.5)  # df 1 (apple)
IDF_2 = math.log(1 + 1.5 / 2.5)  # df 2 (banana, cherry)
NORM = {3: 1.5 * (0.25 + 0.75 * 3 / 2), 2: 1.5 * (0.25 + 0.75 * 2 / 2), 1: 1.5 * (0.25 + 0.75 * 1 / 2)}  # 2.0625 ...


def _tf(tf: int, dl: int, norm: dict[int, float] = NORM) -> float:
    return tf / (tf + norm[dl])


def fresh_bm25s(texts: Sequence[str], queries: Sequence[str]) -> torch.Tensor:
    """(R, N) scores of a fresh bm25s build over `texts` (the index this module replaced)."""
    import bm25s

    index = bm25s.BM25()
    index.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)
    out = torch.zeros(len(queries), len(texts))
    for r, words in enumerate(bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)):
        known = [w for w in words if w in index.vocab_dict]
        if known:
            out[r] = torch.from_numpy(index.get_scores(known))
    return out


def fresh_bm25s_pairs(texts: Sequence[str], queries: Sequence[str]) -> torch.Tensor:
    """(R, N) scores of a fresh bm25s build over `texts`' adjacent word pairs (runs of word characters, lower-cased,
    nothing dropped), each query read as its pairs that hold a word of two or more characters other than a stop word
    (written out here, apart from the module's own reading)."""
    import bm25s
    from bm25s.stopwords import STOPWORDS_EN

    def pairs(text: str, query: bool) -> list[str]:
        words = re.findall(r"\w+", text.lower())
        return [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)
                if not query or any(len(w) > 1 and w not in STOPWORDS_EN for w in (a, b))]

    index = bm25s.BM25()
    index.index([pairs(t, False) for t in texts], show_progress=False)
    out = torch.zeros(len(queries), len(texts))
    for r, q in enumerate(queries):
        known = [p for p in pairs(q, True) if p in index.vocab_dict and p]
        if known:
            out[r] = torch.from_numpy(index.get_scores(known))
    return out


@pytest.fixture(scope="module")
def prose() -> tuple[list[str], list[str]]:
    """Real prose that every checkout holds, so that the bm25s oracle never skips: the project's own pages
    (README and docs/), cut into passages of at most 60 words (some 1 000; tables, code and numbers included),
    and 40 queries made of passages' openings and a few words of their own."""
    root = Path(__file__).parents[3]
    passages = []
    for page in sorted([root / "README.md", *(root / "docs").glob("*.md")]):
        for para in re.split(r"\n\s*\n", page.read_text(encoding="utf-8")):
            words = para.split()
            passages += [" ".join(words[i:i + 60]) for i in range(0, len(words), 60)]
    passages = list(dict.fromkeys(p for p in passages if p))
    assert len(passages) >= 600, len(passages)
    passages = passages * (3000 // len(passages) + 1)  # the random walk below may ask for more than there are
    queries = [" ".join(p.split()[:12]) for p in passages[5:405:10]]
    return passages, queries


def test_scores_are_lucenes_bm25_hand_computed() -> None:
    index = LexicalIndex.from_texts(HAND)
    want = torch.tensor([
        [IDF_1 * _tf(2, 3), 0.0, 0.0],  # 'apple': tf 2 in d0
        [IDF_2 * _tf(1, 3), IDF_2 * _tf(1, 2), 0.0],  # 'banana'
        [0.0, 2 * IDF_2 * _tf(1, 2), 2 * IDF_2 * _tf(1, 1)],  # 'cherry cherry': a repeated word counts twice
        [0.0, 0.0, 0.0],  # 'the zebra': a stop word and an unknown word
    ])
    assert torch.allclose(index.scores(["apple", "BANANA!", "cherry cherry", "the zebra"]), want, atol=1e-6)
    # A new chunk 'apple' (dl 1): N = 4, avgdl = 7 / 4, df(apple) = 2, so idf = ln(1 + 2.5 / 2.5) = ln 2 everywhere.
    norm = {dl: 1.5 * (0.25 + 0.75 * dl / 1.75) for dl in (1, 2, 3)}
    grown = index.added(["apple"])
    assert torch.allclose(grown.scores(["apple"]), torch.tensor([[math.log(2) * _tf(2, 3, norm), 0, 0,
                                                                  math.log(2) * _tf(1, 1, norm)]]), atol=1e-6)
    # Without d0: N = 2, avgdl = 3 / 2; banana's df 1 (ln 2), cherry's 2 (ln(1 + 0.5 / 2.5) = ln 1.2).
    norm = {dl: 1.5 * (0.25 + 0.75 * dl / 1.5) for dl in (1, 2)}
    shrunk = index.deleted([0])
    assert torch.allclose(shrunk.scores(["banana cherry", "apple"]),
                          torch.tensor([[math.log(2) * _tf(1, 2, norm) + math.log(1.2) * _tf(1, 2, norm),
                                         math.log(1.2) * _tf(1, 1, norm)], [0.0, 0.0]]), atol=1e-6)


def test_words_are_bm25s_words(prose: tuple[list[str], list[str]]) -> None:
    import bm25s

    texts = prose[0][:2000] + ["Don't stop: the U.S.A.'s café, naïve Straße 42 x_y __init__ ÉCOLE"]
    want = bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)
    assert [lexical_segments._words(t) for t in texts] == [list(w) for w in want]


def test_random_adds_and_deletes_score_as_a_fresh_bm25s_build(prose: tuple[list[str], list[str]]) -> None:
    passages, questions = prose
    rng = random.Random(0)
    supply = iter(passages[:3000])
    texts = [next(supply) for _ in range(60)]
    index = LexicalIndex.from_texts(texts, pairs=True)
    for step in range(40):
        if rng.random() < 0.6:
            new = [next(supply) for _ in range(rng.choice([1, 1, 3, 17, 40]))]
            index, texts = index.added(new), texts + new
        else:
            gone = set(rng.sample(range(len(texts)), rng.choice([1, 2, 9, 25])))
            index, texts = index.deleted(sorted(gone, reverse=True)), [t for i, t in enumerate(texts) if i not in gone]
        assert len(index) == len(texts)
        if step % 8 == 7:  # the merges kept the segments a binary counter's: O(log N), each sorted by term, then row
            assert index.segments <= math.log2(len(texts)) + 1
            for seg in index._segments:
                key = np.repeat(seg.terms, np.diff(seg.starts)) * seg.size + seg.rows
                assert np.all(np.diff(seg.terms) > 0) and np.all(np.diff(key) > 0) and seg.words == seg.lengths.sum()
    queries = [*questions, "film film film director", "zzyzx qwertyuiop", "", "the of and", texts[5]]
    got, want = index.scores(queries), fresh_bm25s(texts, queries)
    assert want.abs().sum() > 0 and torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    scores, rows = index.top(queries, 7)
    assert torch.allclose(scores, got.gather(1, rows)) and torch.equal(scores, scores.sort(descending=True).values)
    assert torch.allclose(scores, want.topk(7).values, rtol=1e-5, atol=1e-5)
    # The word pairs, kept in step through the same adds and deletes, against bm25s over the pairs of the texts.
    queries += ["of the", "the number of the chunks", "in the index of"]
    got, want = index.pair_scores(queries), fresh_bm25s_pairs(texts, queries)
    assert index.pairs is not None and len(index.pairs) == len(texts)
    assert want.abs().sum() > 0 and torch.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_version_added_or_deleted_from_is_unchanged_for_its_readers(prose: tuple[list[str], list[str]]) -> None:
    passages, questions = prose
    base = LexicalIndex.from_texts(passages[:200]).added(passages[200:230])
    before = base.scores(questions)
    arrays = [(a.copy(), a) for s in base._segments for a in (s.terms, s.starts, s.rows, s.tf, s.lengths)]
    seen: list[bool] = []

    def read() -> None:
        for _ in range(20):
            seen.append(torch.equal(base.scores(questions), before))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    later = base
    for i in range(30):  # the writer builds versions from base while the readers search it
        later = later.added([passages[300 + i], "zebra quagga " + passages[400 + i]])
        base.deleted(range(0, 200, 3)).added(passages[500 + i:510 + i])
    for t in readers:
        t.join()
    assert all(seen) and len(seen) == 40 and len(base) == 230
    assert all(np.array_equal(copy, a) and not a.flags.writeable for copy, a in arrays)
    # A word only later versions hold is unknown to base: it scores 0 there.
    assert base.scores(["zebra quagga"]).abs().sum() == 0 and later.scores(["zebra quagga"]).abs().sum() > 0
    assert torch.equal(base.scores(questions), before)


def test_a_corpus_without_a_word_scores_0_and_grows() -> None:
    index = LexicalIndex.from_texts(["a b c", "d e f"])
    assert torch.equal(index.scores(["a b", "d", "apple"]), torch.zeros(3, 2))
    scores, rows = index.top(["a"], 5)
    assert scores.tolist() == [[0.0, 0.0]] and rows.tolist() == [[0, 1]]  # ties: the lower row first
    grown = index.added(["apple pie", "of the"])  # 'of the': stop words only, a chunk of length 0
    queries = ["apple", "pie pie apple", "a"]
    assert torch.allclose(grown.scores(queries), fresh_bm25s(["a b c", "d e f", "apple pie", "of the"], queries),
                          atol=1e-6)
    assert torch.equal(grown.deleted([2]).scores(queries), torch.zeros(3, 3))


def test_top_breaks_ties_by_the_lower_row() -> None:
    index = LexicalIndex.from_texts(["red fox", "blue fox", "red fox", "green owl", "red fox"])
    scores, rows = index.top(["red fox", "owl", "nothing"], 4)
    assert rows.tolist() == [[0, 2, 4, 1], [3, 0, 1, 2], [0, 1, 2, 3]]
    assert scores[0, 0] == scores[0, 1] == scores[0, 2] > scores[0, 3] > 0
    assert index.top(["fox"], 50)[1].shape == (1, 5) and index.top(["fox"], 0)[1].shape == (1, 0)


def test_bad_input_is_named() -> None:
    index = LexicalIndex.from_texts(HAND)
    with pytest.raises(ValueError, match=r"cannot delete row 3: rows are integers in \[0, 3\)"):
        index.deleted([0, 3])
    with pytest.raises(ValueError, match="cannot delete row 'x'"):
        index.deleted(["x"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="one string 'apple'; wrap it in a list"):
        index.added("apple")
    with pytest.raises(ValueError, match=r"texts\[1\] is int 7, not a text"):
        index.added(["apple", 7])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="k must be an integer >= 0, got -1"):
        index.top(["apple"], -1)
    with pytest.raises(ValueError, match="at least one text"):
        LexicalIndex.from_texts([])
    assert len(index.deleted([0, 1, 2])) == 0 and index.deleted([0, 1, 2]).scores(["apple"]).shape == (1, 0)


def test_save_and_load_give_the_same_index(tmp_path: Path, prose: tuple[list[str], list[str]]) -> None:
    passages, questions = prose
    index = LexicalIndex.from_texts(passages[:100]).added(passages[100:130]).deleted([3, 50, 120]).added(passages[130:131])
    index.save(tmp_path / "lex")
    loaded = LexicalIndex.load(tmp_path / "lex", count=len(index))
    assert loaded.segments == index.segments > 1 and torch.equal(loaded.scores(questions), index.scores(questions))
    more = ["Zebras are African equines.", passages[7]]
    assert torch.equal(loaded.added(more).deleted([0]).scores(questions), index.added(more).deleted([0]).scores(questions))
    assert torch.equal(LexicalIndex.load(tmp_path / "lex", texts=["t"] * len(index)).scores(questions),
                       index.scores(questions))  # a current folder is read, not rebuilt
    with pytest.raises(LexicalLoadError, match="covers 128 chunks but the corpus holds 5"):
        LexicalIndex.load(tmp_path / "lex", count=5)
    LexicalIndex.from_texts(["a b"]).save(tmp_path / "empty")  # no word at all
    assert torch.equal(LexicalIndex.load(tmp_path / "empty").scores(["a"]), torch.zeros(1, 1))
    (tmp_path / "lex" / "words.json").write_text(json.dumps(["only"]))
    with pytest.raises(LexicalLoadError, match="damaged"):
        LexicalIndex.load(tmp_path / "lex")


def test_an_index_saved_in_bm25s_format_is_rebuilt_from_its_texts(tmp_path: Path) -> None:
    texts = json.loads((OLD_FORMAT / "texts.json").read_text())
    expected = json.loads((OLD_FORMAT / "expected.json").read_text())
    index = LexicalIndex.load(OLD_FORMAT / "lexical", count=len(texts), texts=texts)
    assert torch.allclose(index.scores(expected["queries"]), torch.tensor(expected["scores"]), atol=1e-5)
    with pytest.raises(LexicalLoadError, match=r"saved by an earlier qrag \(bm25s's files, version 1\).*texts="):
        LexicalIndex.load(OLD_FORMAT / "lexical")
    with pytest.raises(LexicalLoadError, match="covers 12 chunks but the corpus holds 3"):
        LexicalIndex.load(OLD_FORMAT / "lexical", texts=texts[:3])
    index.save(tmp_path / "lexical")  # saved again: the current format
    assert torch.equal(LexicalIndex.load(tmp_path / "lexical").scores(expected["queries"]),
                       index.scores(expected["queries"]))


def test_the_corpus_cache_is_bounded_by_corpora_and_chunks() -> None:
    cache = lexical_cache._CorpusCache(corpora=3, chunks=10)
    a, b, c, d = ("x1 x2",) * 4, ("y1",) * 4, ("z1",) * 2, ("w1",)
    assert cache.get(a) is cache.get(a) and cache.held() == (1, 4)
    cache.get(b)
    cache.get(a)  # a used last: b is the oldest
    cache.get(c)
    assert cache.held() == (3, 10)
    cache.get(d)  # 11 chunks: b goes
    assert cache.held() == (3, 7) and b not in cache._held
    cache.get(("q",) * 3)  # four corpora: the oldest (a) goes
    cache.get(("r",))  # and then c
    assert list(cache._held) == [d, ("q",) * 3, ("r",)] and cache.held() == (3, 5)
    cache.get(("big",) * 11)  # above the whole bound: built, not held
    assert ("big",) * 11 not in cache._held and cache.held() == (3, 5)
    cache.forget(d)
    cache.forget(("never held",))
    assert cache.held() == (2, 4)


def test_a_forgotten_corpus_is_released_and_the_cache_is_thread_safe() -> None:
    lexical_cache._CACHE.clear()
    texts = ("one fish", "two fish", "red fish")
    index = corpus_lexical(list(texts))
    assert corpus_lexical(texts) is index and lexical_cache._CACHE.held() == (1, 3)
    ref = weakref.ref(index)
    forget_corpus(list(texts))
    del index
    gc.collect()
    assert ref() is None and lexical_cache._CACHE.held() == (0, 0)
    got: list[LexicalIndex] = []
    threads = [threading.Thread(target=lambda: got.append(corpus_lexical(texts))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g is got[0] for g in got) and lexical_cache._CACHE.held() == (1, 3)  # one index a corpus
    lexical_cache._CACHE.clear()


def test_scores_read_the_postings_in_blocks_with_the_same_sums_and_bounded_scratch(
        prose: tuple[list[str], list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    import tracemalloc

    passages, questions = prose
    index = LexicalIndex.from_texts(passages[:300], pairs=True).added(passages[300:420]).deleted([5, 77, 310])
    states = [f"{q} {passages[i]}" for i, q in enumerate(questions[:12])]  # long queries, postings in every segment
    monkeypatch.setattr(lexical_index, "POSTINGS", 1 << 30)
    whole, pairs = index.scores(states), index.pair_scores(states)
    for block in (1, 7, 500):  # blocks that split a word's postings, a segment's, and the queries'
        monkeypatch.setattr(lexical_index, "POSTINGS", block)
        assert torch.equal(index.scores(states), whole) and torch.equal(index.pair_scores(states), pairs)
    assert whole.abs().sum() > 0 and pairs.abs().sum() > 0
    # The scratch is the block's, not every posting's: 100 000 postings of one word in 20 000 chunks.
    big = LexicalIndex.from_texts(["river stone " * (1 + i % 5) for i in range(20_000)])
    peaks = {}
    for block in (1 << 30, 1000):
        monkeypatch.setattr(lexical_index, "POSTINGS", block)
        tracemalloc.start()
        assert big.scores(["river river stone", "stone"] * 2).shape == (4, 20_000)
        peaks[block] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    out = 4 * 20_000 * (8 + 4)  # the float64 sums and the float32 scores they give: 0.96 MB
    assert peaks[1000] < out + 500_000 and peaks[1 << 30] > 5 * peaks[1000], peaks  # 1.3 MB against 8.6 MB
