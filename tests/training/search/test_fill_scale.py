"""The question fill on the hops' scale (METHOD.md §4.4, §4.5): past its hops an exact-k search ranks the rest by
the bare question's state as its first hop does, Q + ω · the question's lexical evidence, so every hit of one
search carries a score on one scale and `score_threshold` compares like with like. Hand-computed on the fake of
test_lexical (one-hot chunks, known Q-values, BM25 over four two-word texts)."""

from __future__ import annotations

import math

from qrag.training.search.hops import question_cut
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, search_many
from qrag.training.search.settings import HopSettings
from tests.training.search.test_fill import GuardedFake, ListStore
from tests.training.search.test_lexical import QUESTION, _hits, _lexical_fake
from tests.training.search.test_search import _fake, _view

# The question's evidence over N = 4 two-word chunks: 'cherry' is in C only, 'farm' in A and B, so A = B =
# ln(2) / ln(10/3) of C's (1); D shares no word (0).
SHARE = math.log(2) / math.log(10 / 3)


def _model(fill: str = "question_unguarded"):  # type: ignore[no-untyped-def]
    model, index = _lexical_fake(weight=1.0)
    model.hop_settings = HopSettings(max_hops=2, stop_threshold=None, fill=fill, lexical_weight=1.0)  # type: ignore[arg-type]
    return model, index


def test_the_fill_ranks_by_the_questions_q_plus_its_lexical_evidence() -> None:
    # Hops: C (0.3 + 1), then A (0.5 + 1) (test_lexical). The question's state: A .6 + SHARE, B .5 + SHARE, C .3 + 1,
    # D 0 + 0; C and A taken, B then D fill, with that state's Q-values and scores. The chunk tower's ranking of the
    # bare question (D .9 first, GuardedFake) is not what fills.
    model, index = _model()
    hits = MultiHopSearcher(model, index).search_one(QUESTION, k=4).hits  # type: ignore[arg-type]
    assert _hits(hits) == [("C", 0, 0.3, 1.3, False), ("A", 1, 0.5, 1.5, False),
                           ("B", 2, 0.5, round(0.5 + SHARE, 6), True), ("D", 2, 0.0, 0.0, True)]
    assert model.question_calls == []  # the chunk tower never encodes the question
    # Q alone (lexical_weight=0): hops A (.6), B (.8); the question's state ranks C (.3), D (0) next.
    plain = MultiHopSearcher(model, index).search_one(QUESTION, k=4, lexical_weight=0).hits  # type: ignore[arg-type]
    assert _hits(plain) == [("A", 0, 0.6, 0.6, False), ("B", 1, 0.8, 0.8, False), ("C", 2, 0.3, 0.3, True),
                            ("D", 2, 0.0, 0.0, True)]


def test_score_threshold_compares_hops_and_fill_on_one_scale() -> None:
    # 1.0 keeps the hops (1.3, 1.5) and B (0.5 + 0.576); D (0) goes. A fill scored by cosine would have given D .9
    # and B .3 on another scale.
    model, index = _model()
    hits = MultiHopSearcher(model, index).search_one(QUESTION, k=4, score_threshold=1.0).hits  # type: ignore[arg-type]
    assert [h.chunk.id for h in hits] == ["C", "A", "B"]
    assert all(h.score is not None and h.score >= 1.0 for h in hits)


def test_the_guard_fills_from_the_same_ranking_after_the_hop_the_stop_rule_refuses() -> None:
    # Guard with threshold .45: hop 2's best (A, Q .5) passes; with .55 it is refused and the question's state fills:
    # after C, A (.6 + SHARE) then B (.5 + SHARE).
    model, index = _model("question")
    model.hop_settings = HopSettings(max_hops=2, stop_threshold=0.55, fill="question", lexical_weight=1.0)
    hits = MultiHopSearcher(model, index).search_one(QUESTION, k=3).hits  # type: ignore[arg-type]
    assert _hits(hits) == [("C", 0, 0.3, 1.3, False), ("A", 1, 0.6, round(0.6 + SHARE, 6), True),
                           ("B", 1, 0.5, round(0.5 + SHARE, 6), True)]


def test_greedy_beam_and_batched_searches_fill_alike() -> None:
    model, index = _model()
    greedy = _hits(MultiHopSearcher(model, index).search_one(QUESTION, k=4).hits)  # type: ignore[arg-type]
    beam = MultiHopSearcher(model, index, SearchConfig(beam_size=1))  # type: ignore[arg-type]
    assert _hits(beam._search_group(index, [QUESTION], beam.config.resolved(model.hop_settings).with_overrides(
        {"k": 4}).resolved(model.hop_settings), None, None)[0].hits) == greedy  # the beam path at width 1
    # Beam 2: A (.6 + SHARE) then B (.8 + 1: 'farm' twice in the state's text) totals 2.976 against C, A's 2.8; the
    # fill is the question's state as for greedy hops: C (1.3), then D.
    wide = MultiHopSearcher(model, index, SearchConfig(beam_size=2)).search_one(QUESTION, k=4).hits  # type: ignore[arg-type]
    assert _hits(wide) == [("A", 0, 0.6, round(0.6 + SHARE, 6), False), ("B", 1, 0.8, 1.8, False),
                           ("C", 2, 0.3, 1.3, True), ("D", 2, 0.0, 0.0, True)]
    many = search_many(model, [QUESTION, QUESTION], [index, index], SearchConfig(k=4))  # type: ignore[arg-type]
    assert all(_hits(r.hits) == greedy for r in many)


# Q(()) = A .9, B .7, C .1; after A the state's best is C at .6, below what the question gives B (.7).
CUT_TABLE = {(): [0.9, 0.7, 0.1, 0.0], ("A",): [0.0, 0.5, 0.6, 0.2], ("A", "C"): [0.0, 0.3, 0.0, 0.9]}


def _cut_model(fill: str):  # type: ignore[no-untyped-def]
    model, index = _fake(CUT_TABLE, GuardedFake)  # GuardedFake scores one corpus per question too (search_many)
    model.hop_settings = HopSettings(max_hops=3, stop_threshold=None, fill=fill)  # type: ignore[arg-type]
    return model, index


def test_the_guard_ends_the_hops_where_the_questions_own_next_passage_scores_higher() -> None:
    # Hop 2 would take C (.6); the question's own ranking offers B (.7) there, so the guard ends the hops after A and
    # fills B, C from the question's state. Unguarded, every hop is kept: A, C, then hop 3's D (.9).
    model, index = _cut_model("question")
    assert _view(MultiHopSearcher(model, index).search_one("q", k=3)) == [  # type: ignore[arg-type]
        ("A", 0, 0.9, False), ("B", 1, 0.7, True), ("C", 1, 0.1, True)]
    model, index = _cut_model("question_unguarded")
    assert _view(MultiHopSearcher(model, index).search_one("q", k=3)) == [  # type: ignore[arg-type]
        ("A", 0, 0.9, False), ("C", 1, 0.6, False), ("D", 2, 0.9, False)]
    # The cut never takes the first hop, and k=1 is hop 1 alone.
    model, index = _cut_model("question")
    assert _view(MultiHopSearcher(model, index).search_one("q", k=1)) == [("A", 0, 0.9, False)]  # type: ignore[arg-type]


def test_the_cut_is_the_same_over_beams_stores_and_batched_corpora() -> None:
    model, index = _cut_model("question")
    expected = [("A", 0, 0.9, False), ("B", 1, 0.7, True), ("C", 1, 0.1, True)]
    store = MultiHopSearcher(model, ListStore(index))  # type: ignore[arg-type]
    assert _view(store.search_one("q", k=3)) == expected
    many = search_many(model, ["q", "q"], [index, index], SearchConfig(k=3))  # type: ignore[arg-type]
    assert all(_view(r) == expected for r in many)
    # Beam 2 keeps A, C, D (2.4) as its best sequence; the guard cuts it after A as well.
    assert _view(MultiHopSearcher(model, index).search_one("q", k=3, beam_size=2)) == expected  # type: ignore[arg-type]


def test_question_cut_by_hand() -> None:
    ranking = [("a", 0.9, 0.9), ("b", 0.7, 0.7), ("c", 0.1, 0.1)]
    assert question_cut(ranking, ["a", "c"], [0.9, 0.6]) == 1  # .6 below b's .7
    assert question_cut(ranking, ["a", "b"], [0.9, 0.7]) == 2  # a tie keeps the hop
    assert question_cut(ranking, ["b", "a", "c"], [0.8, 0.95, 0.2]) == 3  # rivals a (.9), then c (.1): both beaten
    assert question_cut(ranking, ["b", "c"], [0.8, 0.3], min_hops=2) == 2  # min_hops hops are never cut
    assert question_cut([], ["a", "b"], [0.9, 0.1]) == 2  # nothing to compare with
