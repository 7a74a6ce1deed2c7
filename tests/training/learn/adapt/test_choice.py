"""`qrag-adapt`'s choice rule, its output folder and its report, by hand: what it ships, what it refuses, what a
resumed run keeps, the learning curve it shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qrag.training.learn.adapt.choice import (
    HARM_TOLERANCE,
    Candidate,
    choose,
    paired_standard_error,
    standard_error,
)
from qrag.training.learn.adapt.folder import AdaptError, AdaptFolder, Request
from qrag.training.learn.adapt.report import learning_curve


def test_the_best_held_out_recall_wins_among_those_that_keep_the_start() -> None:
    start = Candidate(0.0, 2, 0.40, 0.88)
    harmful = Candidate(1.0, 3, 0.60, 0.88 - HARM_TOLERANCE - 0.001)  # best held out, but costs the start too much
    kept = Candidate(0.5, 3, 0.50, 0.88 - HARM_TOLERANCE + 0.001)
    best, why = choose([start, Candidate(0.5, 2, 0.45, kept.start_score), kept, harmful])
    assert best == kept
    assert "w = 0.5 with 3 hops" in why and "refused" in why and "0.880" in why


def test_within_one_standard_error_of_the_best_the_largest_weight_wins_at_its_best_horizon() -> None:
    start = Candidate(0.0, 2, 0.62, 0.88, 0.02)
    blend = Candidate(0.75, 5, 0.70, 0.88, 0.02)  # the highest reading
    tuned_5, tuned_3 = Candidate(1.0, 5, 0.69, 0.88, 0.02), Candidate(1.0, 3, 0.681, 0.88, 0.02)
    best, why = choose([start, blend, tuned_3, tuned_5])
    assert best == tuned_5  # 0.69 ≥ 0.70 − 0.02; at w = 1 the better horizon
    assert "w = 1 with 5 hops" in why and "one paired standard error (0.020)" in why and "w = 0.75, 5 hops: 0.700" in why
    below = Candidate(1.0, 5, 0.679, 0.88, 0.02)  # 0.021 below the best: out of reach of the rule
    assert choose([start, blend, below])[0] == blend
    tie_short, tie_long = Candidate(1.0, 3, 0.69, 0.88), Candidate(1.0, 5, 0.69, 0.88)
    assert choose([start, tie_long, tie_short])[0] == tie_short  # a tie at one weight: the shorter horizon
    # without a spread (a record from before the rule) the highest reading alone decides
    assert choose([Candidate(0.0, 2, 0.5, 0.9), Candidate(0.25, 3, 0.5, 0.9)])[0].weight == 0.25
    assert choose([Candidate(0.0, 2, 0.51, 0.9), Candidate(0.25, 3, 0.5, 0.9)])[0].weight == 0.0


def test_a_blend_below_the_start_is_never_shipped_even_within_noise_of_it() -> None:
    """Held out, the start finds 0.62 at 3 hops; the fine-tune 0.60, within one standard error (0.05) of it, which
    the largest-weight rule alone would ship. Never worse: it is refused, the start ships, and the reason says so with
    the figures."""
    start_2, start_3 = Candidate(0.0, 2, 0.58, 0.88, 0.05), Candidate(0.0, 3, 0.62, 0.88, 0.05)
    tuned, blend = Candidate(1.0, 3, 0.60, 0.88, 0.05), Candidate(0.5, 3, 0.61, 0.88, 0.05)
    best, why = choose([start_2, start_3, blend, tuned])
    assert best == start_3
    assert why.startswith("the start ships unchanged: no blend found more held-out passages than it did (recall@5 "
                          "0.620 with 3 hops; the best blend, w = 0.5 with 3 hops, 0.610)")
    assert "2 candidate(s) found fewer than the start (w = 0.5, w = 1) and were refused" in why
    # level with the start is not below it: the fine-tune, within noise of the best, ships
    level = Candidate(1.0, 3, 0.62, 0.88, 0.05)
    assert choose([start_3, level, Candidate(0.5, 3, 0.64, 0.88, 0.05)])[0] == level
    # a candidate below the start at its best horizon is refused though it beats the start at another
    assert choose([start_2, start_3, Candidate(1.0, 2, 0.59, 0.88)])[0] == start_3


def test_the_standard_error_between_candidates_is_paired_over_their_questions() -> None:
    """Scored on the same questions, a candidate that finds less on one question of eight and more on another (a
    0.016 gap, a paired standard error of 0.037) is within noise of the best - while a candidate that trails on every
    question by as little is not: the per-question differences have no spread."""
    best_rows = (1.0, 0.5, 0.0, 1.0, 0.5, 0.5, 1.0, 0.0)
    best = Candidate(0.5, 3, sum(best_rows) / 8, 0.88, 0.0, best_rows)
    mixed = (0.75, 0.625, *best_rows[2:])  # 0.25 less on the first question, 0.125 more on the second
    close = Candidate(1.0, 3, sum(mixed) / 8, 0.88, 0.0, mixed)
    assert paired_standard_error(close, best) == pytest.approx(standard_error([-0.25, 0.125] + [0.0] * 6))
    assert best.held_out - close.held_out == pytest.approx(0.015625)
    assert paired_standard_error(close, best) > 0.03
    start = Candidate(0.0, 3, 0.2, 0.88, 0.0, tuple(0.2 for _ in best_rows))
    assert choose([start, best, close])[0] == close  # the largest weight within noise of the best
    steady = tuple(x - 0.016 for x in best_rows)  # 0.016 below on every question: no spread in the differences
    trailing = Candidate(1.0, 3, sum(steady) / 8, 0.88, 0.3, steady)
    assert paired_standard_error(trailing, best) == pytest.approx(0.0, abs=1e-12)
    assert choose([start, best, trailing])[0] == best  # an unpaired error (0.3) would have let it win


def test_the_standard_error_is_the_sample_deviation_over_the_root_of_n() -> None:
    assert standard_error([0.0, 1.0, 0.5, 0.5]) == pytest.approx((1 / 6 / 4) ** 0.5)  # variance (.25 + .25) / 3
    assert standard_error([0.7]) == 0.0 and standard_error([0.3, 0.3, 0.3]) == 0.0


def test_without_the_starts_data_held_out_recall_alone_decides_and_the_reason_says_so() -> None:
    best, why = choose([Candidate(0.0, 2, 0.4, None), Candidate(1.0, 2, 0.6, None)])
    assert best.weight == 1.0 and "nothing guarded" in why


def test_the_start_must_be_a_candidate() -> None:
    with pytest.raises(ValueError, match="include the start"):
        choose([Candidate(0.5, 2, 0.4, 0.9)])


REQUEST = Request("/c.jsonl", "abc", None, None, "qrag/hotpotqa-minilm", 0, 4000)


def test_a_new_or_empty_folder_starts_a_run_and_the_same_request_resumes_it(tmp_path: Path) -> None:
    folder = AdaptFolder(tmp_path / "new")
    record = folder.open(REQUEST)
    assert record.seconds == {} and not folder.out.exists()  # opening writes nothing
    with folder.phase(record, "embed"):
        record.facts["n"] = 3
    again = AdaptFolder(tmp_path / "new").open(REQUEST)
    assert again.done("embed") and again.facts == {"n": 3} and again.seconds["embed"] >= 0
    (tmp_path / "empty").mkdir()
    assert AdaptFolder(tmp_path / "empty").open(REQUEST).seconds == {}


def test_a_phase_that_fails_is_not_recorded_as_done(tmp_path: Path) -> None:
    folder = AdaptFolder(tmp_path / "out")
    record = folder.open(REQUEST)
    with pytest.raises(RuntimeError), folder.phase(record, "train"):
        raise RuntimeError("interrupted")
    assert not folder.open(REQUEST).done("train")


def test_a_folder_holding_something_else_or_another_request_is_refused_and_kept(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(AdaptError, match="already holds files \\(notes.txt\\).*nothing there is overwritten"):
        AdaptFolder(mine).open(REQUEST)
    assert (mine / "notes.txt").read_text() == "keep me" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(AdaptError, match="is a file"):
        AdaptFolder(tmp_path / "file").open(REQUEST)
    run = AdaptFolder(tmp_path / "run")
    run.save(run.open(REQUEST))
    other = Request("/c.jsonl", "def", None, None, "qrag/hotpotqa-minilm", 1, 4000)
    with pytest.raises(AdaptError, match="another request \\(it differs in corpus_digest, seed\\)"):
        run.open(other)
    (run.work / "adapt.json").write_text(json.dumps({"format": "something"}))
    with pytest.raises(AdaptError, match="not a readable qrag-adapt record"):
        run.open(REQUEST)


def test_the_report_shows_the_runs_learning_curve_evenly_spaced_with_its_last_point(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"transitions": 512 * i, "charts/fact_recall": 0.5 + 0.01 * i, "losses/td_loss": 0.1, "charts/updates": 16 * i}
            for i in range(1, 11)]
    rows.insert(3, {"transitions": 1600, "val/fact_recall": 0.9})  # a validation line: not a training point
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = [line for line in learning_curve(metrics, rows=4) if line.startswith("| ") and line[2].isdigit()]
    assert [line.split(" | ")[0] for line in table] == ["| 512", "| 2048", "| 3584", "| 5120"]  # 1, 4, 7 of 10; the last
    assert table[-1] == "| 5120 | 160 | 0.600 | 0.1000 |"
    assert learning_curve(tmp_path / "missing.jsonl") == []
