"""Metric tests against hand-computed cases, including the traps METHOD.md §5 names."""

from __future__ import annotations

import pytest

from qrag.eval.metrics import (
    babilong_correct,
    exact_match,
    fact_scores,
    final_answer,
    first_sentence,
    normalize_answer,
    qa_scores,
    recall_at_k,
    ruler_any_match,
    ruler_fraction,
    token_f1,
    wilson_interval,
)


def test_fact_scores_hand_computed() -> None:
    # retrieved {1, 2, 3}, gold {2, 5}: hit 1 -> P 1/3, R 1/2, F1 2*(1/6)/(5/6) = 0.4, EM 0
    s = fact_scores([3, 1, 2], [2, 5])
    assert s["fact_precision"] == pytest.approx(1 / 3)
    assert s["fact_recall"] == pytest.approx(0.5)
    assert s["fact_f1"] == pytest.approx(0.4)
    assert s["fact_em"] == 0.0
    assert fact_scores([5, 2, 9], [2, 5])["fact_em"] == 1.0
    assert fact_scores([], [1]) == {"fact_precision": 0.0, "fact_recall": 0.0, "fact_f1": 0.0, "fact_em": 0.0}
    with pytest.raises(ValueError, match="at least one gold"):
        fact_scores([1], [])


def test_recall_at_k() -> None:
    assert recall_at_k([4, 2, 7, 1], [1, 2], 2) == 0.5
    assert recall_at_k([4, 2, 7, 1], [1, 2], 4) == 1.0
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k([1], [1], 0)


def test_babilong_label_matching_basic_and_case() -> None:
    assert babilong_correct("The milk is in the Kitchen.", "kitchen", "Where is the milk?", "qa2")
    assert babilong_correct("KITCHEN", "kitchen", "Where is the milk?", "qa2")
    # two labels left -> wrong even though the target is there
    assert not babilong_correct("kitchen or garden", "kitchen", "Where is the milk?", "qa2")
    assert not babilong_correct("garden", "kitchen", "Where is the milk?", "qa2")


def test_babilong_only_first_sentence_counts() -> None:
    assert babilong_correct("Kitchen. Before that it was in the garden.", "kitchen", "Where is Mary?", "qa1")
    assert not babilong_correct("I think. It is the kitchen.", "kitchen", "Where is Mary?", "qa1")


def test_babilong_label_in_question_is_ignored() -> None:
    # qa3: the question names the garden; echoing it must not make the answer ambiguous.
    q = "Where was the football before the garden?"
    assert babilong_correct("The football was in the hallway before the garden.", "hallway", q, "qa3")
    # qa5: the question names Mary and the milk; only Fred is left.
    q5 = "Who gave the milk to Mary?"
    assert babilong_correct("Fred gave the milk to Mary.", "fred", q5, "qa5")
    assert not babilong_correct("Jeff gave the milk to Mary.", "fred", q5, "qa5")


def test_babilong_whole_words_one_inside_none() -> None:
    # a target outside the label sets is matched on whole words: "none" does not contain the word "one".
    assert not babilong_correct("none", "one", "How many objects is Mary carrying?", "qa7")
    assert babilong_correct("One.", "one", "How many objects is Mary carrying?", "qa7")
    # a label inside a longer word is not the label ("gardener" is not "garden")
    assert not babilong_correct("the gardener", "garden", "Where is John?", "qa1")


def test_first_sentence() -> None:
    assert first_sentence("  Kitchen. Garden.") == "Kitchen"
    assert first_sentence("kitchen\ngarden") == "kitchen"
    assert first_sentence("kitchen") == "kitchen"


def test_ruler_metrics() -> None:
    out = "The numbers are 1234567, 7654321 and 99."
    assert ruler_fraction(out, ["1234567", "7654321", "1111111", "2222222"]) == 0.5
    # whole words: 123456 is inside 1234567 but is not present
    assert ruler_fraction(out, ["123456"]) == 0.0
    assert ruler_any_match("It was PARIS.", ["London", "paris"]) == 1.0
    assert ruler_any_match("Parisian food", ["paris"]) == 0.0


def test_squad_normalisation_and_final_answer() -> None:
    assert normalize_answer("The  Eiffel, Tower!") == "eiffel tower"
    out = "Let me think. Paris is in France.\nFinal answer: The Eiffel Tower."
    assert final_answer(out) == "The Eiffel Tower."
    assert final_answer("FINAL ANSWER: yes") == "yes"
    assert final_answer("no marker\nLast line") == "Last line"
    assert qa_scores(out, ["Eiffel Tower", "tower"]) == {"answer_em": 1.0, "answer_f1": 1.0}


def test_token_f1_hand_computed() -> None:
    # pred "eiffel tower paris", gold "eiffel tower": common 2, P 2/3, R 1 -> F1 0.8
    assert token_f1("Eiffel tower, Paris", "the Eiffel Tower") == pytest.approx(0.8)
    assert exact_match("Eiffel tower, Paris", "the Eiffel Tower") == 0.0
    assert token_f1("London", "Paris") == 0.0


def test_paired_margin_by_hand() -> None:
    from qrag.eval.metrics import paired_margin

    # Differences 1, 0, 0, 1: mean 0.5, sample sd = sqrt(1/3), se = sqrt(1/3)/2 = 0.288675.
    mean, half = paired_margin([1, 1, 0, 1], [0, 1, 0, 0])
    assert mean == pytest.approx(0.5)
    assert half == pytest.approx(1.96 * (1 / 3) ** 0.5 / 2)
    assert paired_margin([1.0, 1.0], [0.0, 0.0]) == (1.0, 0.0)  # no spread: a zero-width interval
    assert paired_margin([1.0], [0.0])[1] == float("inf")
    with pytest.raises(ValueError, match="equally long"):
        paired_margin([1.0, 0.0], [1.0])


def test_margins_pick_the_best_baseline_per_cell_and_pair_by_id() -> None:
    from qrag.eval.report import margins, margins_table

    def rec(method: str, i: int, em: float, task: str = "qa2") -> dict[str, object]:
        return {"method": method, "id": f"s{i}", "task": task, "length": "4k", "fact_em": em}

    records = [rec("qrag", i, em) for i, em in enumerate([1, 1, 1, 0])]
    records += [rec("bm25", i, em) for i, em in enumerate([0, 0, 0, 0])]
    records += [rec("multihop", i, em) for i, em in enumerate([1, 0, 0, 0])]
    records += [rec("multihop", 9, 1.0)]  # a sample qrag lacks is not paired
    records += [rec("bm25", 0, 1.0, task="qa3")]  # a cell without qrag is skipped
    (row,) = margins(records, "qrag", ["bm25", "multihop", "dense"])
    assert row["best_baseline"] == "multihop" and row["n"] == 4
    assert row["method_mean"] == 0.75 and row["baseline_mean"] == 0.25
    assert row["margin"] == pytest.approx(0.5)  # differences 0, 1, 1, 0
    assert row["ci95"] == pytest.approx(1.96 * (1 / 3) ** 0.5 / 2)
    assert row["ahead"] is False  # 0.5 − 0.566 < 0: not significant with four samples
    assert "| qa2 | 4k | qrag 0.750 | multihop 0.250 | +0.500 ± 0.566 | 4 | no |" in margins_table([row])


def test_wilson_interval_by_hand() -> None:
    # 24 of 27: centre (p + z²/2n) / (1 + z²/n) = 0.84046, half-width z·√(p(1−p)/n + z²/4n²) / (1 + z²/n) = 0.12103
    assert wilson_interval(24, 27) == pytest.approx((0.71942, 0.96148), abs=1e-5)
    assert wilson_interval(27, 27) == pytest.approx((0.87544, 1.0), abs=1e-5)  # all right: still a width
    lo, hi = wilson_interval(0, 27)
    assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(0.12456, abs=1e-5)
    with pytest.raises(ValueError, match="28 of 27"):
        wilson_interval(28, 27)
