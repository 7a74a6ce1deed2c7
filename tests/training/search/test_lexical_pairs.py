"""Word pairs in the lexical evidence (METHOD.md §4.5): BM25 over adjacent word pairs hand-computed, kept in step with
the words through adds, deletes, saves and loads, the cache and `with_lexical` upgrading an index without them, and
hops ranked by Q + ω · (words + ρ · pairs) on a fake Q-network where only the pairs tell two chunks apart."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from qrag.training.model.config import ConfigError
from qrag.training.search import hops
from qrag.training.search.index import ChunkIndex, IndexLoadError
from qrag.training.search.lexical import LexicalIndex, LexicalLoadError, corpus_lexical, lexical_evidence
from qrag.training.search.searcher import MultiHopSearcher, SearchError
from qrag.training.search.settings import HopSettings
from tests.training.search.test_fill import GuardedFake

# Three chunks of two pairs each (dl 2 = avgdl, so every tf component is 1 / (1 + 1.5) = 0.4); a pair in one chunk
# has idf ln(1 + (3 - 1 + 0.5) / 1.5).
PAIR_TEXTS = ["new york city", "york new city", "city of york"]
ONE = math.log(1 + 2.5 / 1.5) * 0.4


def test_pair_scores_are_bm25_over_adjacent_words_hand_computed() -> None:
    index = LexicalIndex.from_texts(PAIR_TEXTS, pairs=True)
    got = index.pair_scores(["New York!", "in new york city", "city of york", "York", "of"])  # (5, 3)
    want = torch.tensor([[ONE, 0, 0],  # 'new york' is d0's only
                         [2 * ONE, 0, 0],  # 'new york' and 'york city' ('in new' is unknown)
                         [0, 0, 2 * ONE],  # 'city of' and 'of york': stop words are kept in pairs
                         [0, 0, 0], [0, 0, 0]])  # one word makes no pair
    assert torch.allclose(got, want, atol=1e-6)
    # The words cannot tell 'new york city' from 'york new city' (one bag of words); the pairs can.
    words = index.scores(["new york"])[0]
    assert words[0] == words[1] > 0
    assert torch.equal(index.scores(["new york"]), LexicalIndex.from_texts(PAIR_TEXTS).scores(["new york"]))
    with pytest.raises(ValueError, match="holds no word pairs: build it with .*pairs=True"):
        LexicalIndex.from_texts(PAIR_TEXTS).pair_scores(["new york"])


def test_adds_and_deletes_keep_the_pairs_as_a_fresh_build() -> None:
    rng = random.Random(3)
    vocab = "the bank of england new york city river stone old north west house".split()
    supply = iter([" ".join(rng.choices(vocab, k=rng.randint(1, 9))) for _ in range(400)])
    texts = [next(supply) for _ in range(20)]
    index = LexicalIndex.from_texts(texts, pairs=True)
    for _ in range(25):
        if rng.random() < 0.6:
            new = [next(supply) for _ in range(rng.choice([1, 4, 11]))]
            index, texts = index.added(new), texts + new
        else:
            gone = set(rng.sample(range(len(texts)), rng.choice([1, 3, 7])))
            index, texts = index.deleted(sorted(gone)), [t for i, t in enumerate(texts) if i not in gone]
    fresh = LexicalIndex.from_texts(texts, pairs=True)
    queries = ["the bank of england", "new york city river", "old house", "west"]
    assert index.pairs is not None and len(index.pairs) == len(index) == len(texts)
    assert fresh.pair_scores(queries).abs().sum() > 0
    assert torch.allclose(index.pair_scores(queries), fresh.pair_scores(queries), atol=1e-5)
    assert torch.allclose(index.scores(queries), fresh.scores(queries), atol=1e-5)


def test_pairs_save_and_load_and_a_damaged_pair_index_is_named(tmp_path: Path) -> None:
    index = LexicalIndex.from_texts(PAIR_TEXTS, pairs=True).added(["new city of stone"]).deleted([1])
    loaded = LexicalIndex.load(index.save(tmp_path / "lex"), count=3)
    queries = ["new york city", "city of stone"]
    assert torch.equal(loaded.pair_scores(queries), index.pair_scores(queries))
    assert torch.equal(loaded.scores(queries), index.scores(queries))
    head = json.loads((tmp_path / "lex" / "lexical.json").read_text())
    assert head["pairs"] is True and head["terms"] == "words"
    # An index saved before word pairs (no 'terms', no 'pairs') loads as words alone.
    words = LexicalIndex.from_texts(PAIR_TEXTS).save(tmp_path / "old")
    old = json.loads((words / "lexical.json").read_text())
    del old["terms"], old["pairs"]
    (words / "lexical.json").write_text(json.dumps(old))
    assert LexicalIndex.load(words).pairs is None
    sub = tmp_path / "lex" / "pairs" / "lexical.json"
    sub.write_text(json.dumps({**json.loads(sub.read_text()), "count": 9}))
    with pytest.raises(LexicalLoadError, match="damaged .*not a word-pair index of the same chunks"):
        LexicalIndex.load(tmp_path / "lex")


def test_the_cache_and_with_lexical_give_an_index_without_pairs_its_pairs(tmp_path: Path) -> None:
    texts = ["a river bank", "the bank of england", "bank river a"]
    words = corpus_lexical(texts)
    assert words.pairs is None and corpus_lexical(texts) is words
    both = corpus_lexical(texts, pairs=True)
    assert both.pairs is not None and corpus_lexical(texts) is both  # the held index now has them
    model = GuardedFake({t: [1.0, 0.0] for t in [*texts, "river bank of england"]}, lambda q, sel: [1.0, 0.0])
    index = ChunkIndex.from_texts(model, texts, lexical=True)  # type: ignore[arg-type]
    assert index.lexical is not None and index.lexical.pairs is None  # the model weighs no pairs
    index.with_lexical(pairs=True)
    assert index.lexical is not None and index.lexical.pairs is not None
    index.add(model, ["river bank of england"], ["n"])  # type: ignore[arg-type]
    index.delete(["1"])
    assert index.lexical is not None and index.lexical.pairs is not None
    fresh = LexicalIndex.from_texts(list(index.texts), pairs=True)
    assert torch.allclose(index.lexical.pair_scores(["the river bank of england"]),
                          fresh.pair_scores(["the river bank of england"]))
    loaded = ChunkIndex.load(index.save(tmp_path / "ix"))
    assert loaded.lexical is not None and torch.equal(loaded.lexical.pair_scores(["river bank"]),
                                                      index.lexical.pair_scores(["river bank"]))
    (tmp_path / "ix" / "lexical" / "pairs" / "tf.npy").write_bytes(b"\x93NUMPY truncated")
    with pytest.raises(IndexLoadError, match="lexical"):
        ChunkIndex.load(tmp_path / "ix")


ORDER = [PAIR_TEXTS[1], PAIR_TEXTS[0], PAIR_TEXTS[2]]  # 'york new city', 'new york city', 'city of york'


def _pair_fake(pair_weight: float) -> tuple[GuardedFake, ChunkIndex]:
    # Q of the bare question: 'york new city' .5, 'new york city' .45, 'city of york' 0 (one-hot chunk vectors).
    model = GuardedFake({t: [float(i == j) for j in range(3)] for i, t in enumerate(ORDER)},
                        lambda q, sel: [0.5, 0.45, 0.0] if not sel else [0.0, 0.0, 0.0])
    model.hop_settings = HopSettings(max_hops=2, stop_threshold=None, lexical_weight=1.0, pair_weight=pair_weight)
    return model, ChunkIndex.from_texts(model, ORDER, ids=["york new", "new york", "city of"],  # type: ignore[arg-type]
                                        lexical=True)


def test_hops_rank_by_q_plus_weighted_words_and_pairs() -> None:
    question = "Which city is New York?"
    # Words: 'city', 'new', 'york' in 'york new city' and 'new york city' alike (evidence 1 each): Q decides.
    model, index = _pair_fake(0.0)
    first = MultiHopSearcher(model, index).search_one(question, k=1).hits[0]  # type: ignore[arg-type]
    assert (first.chunk.id, round(float(first.score or 0), 6)) == ("york new", 1.5)
    # With ρ = 0.5 the pair 'new york' (in 'new york city' only: pair evidence 1, the other 0) passes it:
    # 0.45 + 1 · (1 + 0.5 · 1) = 1.95 against 0.5 + 1 · (1 + 0) = 1.5. The index gets its pairs when searched.
    model.hop_settings = HopSettings(max_hops=2, stop_threshold=None, lexical_weight=1.0, pair_weight=0.5)
    assert index.lexical is not None and index.lexical.pairs is None
    first = MultiHopSearcher(model, index).search_one(question, k=1).hits[0]  # type: ignore[arg-type]
    assert (first.chunk.id, round(float(first.q_value), 6), round(float(first.score or 0), 6)) == ("new york", 0.45, 1.95)
    assert index.lexical is not None and index.lexical.pairs is not None
    # The evidence itself: words scaled to [0, 1] plus ρ × pairs scaled to [0, 1].
    corpora = hops.Corpora.shared(index.vectors, index.texts, 1, index.lexical)
    available = torch.ones(1, 3, dtype=torch.bool)
    got = hops._lexical_evidence(corpora, [0], [question], [question], available, 0.5)
    want = (lexical_evidence(index.lexical.scores([question]), available)
            + 0.5 * lexical_evidence(index.lexical.pair_scores([question]), available))
    assert torch.allclose(got, want) and torch.allclose(got[0, :2], torch.tensor([1.0, 1.5]))
    # After a hop the words are the state's text (question + passage taken), the pairs still the question's alone:
    # the state's text "Which city is New York? new york city" holds 'york new', a pair of 'york new city'; the
    # question does not, so that chunk's pair evidence is 0.
    assert index.lexical.pair_scores([hops.state_text(question, [index.texts[1]])])[0, 0] > 0
    q, score = hops.hop_scores(model, [question], corpora, [0], [[1]], "selection", lexical_weight=1.0)  # type: ignore[arg-type]
    free = torch.isfinite(q)
    words = lexical_evidence(index.lexical.scores([hops.state_text(question, [index.texts[1]])]), free)
    pairs = lexical_evidence(index.lexical.pair_scores([question]), free)
    assert pairs[0, 0] == 0 and torch.allclose(score[free], (q + words + 0.5 * pairs)[free])


def test_a_corpus_without_pairs_and_a_bad_pair_weight_are_named() -> None:
    model, index = _pair_fake(0.5)
    words_only = LexicalIndex.from_texts(list(index.texts))
    corpora = hops.Corpora.shared(index.vectors, index.texts, 1, words_only)
    with pytest.raises(SearchError, match="weighs word pairs .* holds none"):
        hops.greedy_hops(model, ["new york"], corpora, [1], lexical_weight=1.0)  # type: ignore[arg-type]
    for bad in (-0.5, float("nan"), True, "0.5"):
        with pytest.raises(ConfigError, match="hops.pair_weight must be a finite number >= 0"):
            HopSettings(pair_weight=bad).validate()  # type: ignore[arg-type]


def test_a_pair_of_stop_words_earns_nothing() -> None:
    # No chunk holds a content pair of the question ('capital city', 'city of', 'of france' are absent); the only pair
    # present anywhere is 'of the', richest in the first chunk. Before, the scaling by the best chunk gave that chunk
    # the full pair evidence; a pair neither of whose words the word index reads ("of the", "s a", "i was") is not a
    # query term, so the pair evidence is 0 everywhere.
    texts = ["some of the parts of the rest of the whole", "a part of the land", "nothing here"]
    index = LexicalIndex.from_texts(texts, pairs=True)
    question = "What is the capital city of the France?"
    available = torch.ones(1, 3, dtype=torch.bool)
    assert torch.equal(index.pair_scores([question]), torch.zeros(1, 3))
    assert torch.equal(lexical_evidence(index.pair_scores([question]), available), torch.zeros(1, 3))
    assert torch.equal(index.pair_scores(["of the", "it's a", "I was in"]), torch.zeros(3, 3))
    # A pair with one word the word index reads still counts, stop word and all: 'part of' is the second chunk's.
    assert index.pair_scores(["the part of it"])[0, 1] > 0 and index.pair_scores(["the part of it"])[0, 0] == 0
    # The pairs are still indexed (the saved format is unchanged): a fresh build over the same texts agrees.
    assert index.pairs is not None and "of the" in index.pairs._vocabulary.ids
