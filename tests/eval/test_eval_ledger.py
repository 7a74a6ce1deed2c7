"""Evaluation reads you can audit: evaluation-only files are known by their bytes as well as their names (a renamed
copy is still refused by the probes that choose), and `qrag-eval` appends every read of them to a ledger."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from qrag.eval import ledger
from qrag.eval.cli import main as eval_main
from qrag.training.data import evaluation_only
from qrag.training.data.evaluation_only import KNOWN_FILES, RELEASED, file_sha256, recognise
from qrag.training.data.fanoutqa import fanoutqa_path
from qrag.training.data.hotpot_pool import halueval_path

REPO = Path(__file__).resolve().parents[2]
SQUAD = Path(__file__).parent / "ordinary_text" / "squad_tiny.json"
MULTIRC = Path(__file__).parent / "ordinary_text" / "multirc_tiny.json"


def test_the_installed_evaluation_files_have_the_recorded_hashes() -> None:
    known = {f.name: f.sha256 for f in (*KNOWN_FILES, *RELEASED)}
    for split in ("dev", "test"):
        assert file_sha256(fanoutqa_path(split)) == known[f"fanoutqa/data/{fanoutqa_path(split).name}"]
    assert {f.name for f in RELEASED} & {f.name for f in KNOWN_FILES} == set()
    assert file_sha256(halueval_path()) == evaluation_only.HOTPOTQA_TEST.sha256


@pytest.mark.parametrize("split", ["test"])
def test_a_renamed_copy_of_an_evaluation_file_is_recognised_by_its_bytes(tmp_path: Path, split: str) -> None:
    copy = shutil.copyfile(fanoutqa_path(split), tmp_path / "my_questions.json")
    found = recognise(copy)
    assert found is not None and found.by == ("content",)
    assert found.name == f"fanoutqa/data/fanout-final-{split}.json"


def test_names_still_mark_a_file_and_other_files_are_not_marked(tmp_path: Path) -> None:
    marked = shutil.copyfile(SQUAD, tmp_path / "nyt_v1.0.json")
    found = recognise(marked)
    assert found is not None and found.by == ("name",) and found.known is None and found.name == "nyt_v1.0.json"
    assert recognise(SQUAD) is None
    assert recognise(tmp_path / "missing.json") is None and recognise(tmp_path) is None


def test_a_probe_refuses_a_renamed_evaluation_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(REPO / "experiments"))
    try:
        from squad_probe import parse_validation_args, squad_probe_parser
    finally:
        sys.path.remove(str(REPO / "experiments"))
    renamed = shutil.copyfile(fanoutqa_path("test"), tmp_path / "new_wiki_v1.0.json")
    with pytest.raises(SystemExit) as stop:
        parse_validation_args(squad_probe_parser(None), ["--squad", str(renamed), "--out", str(tmp_path / "o")])
    assert stop.value.code == 2 and "evaluation-only" in capsys.readouterr().err
    args = parse_validation_args(squad_probe_parser(None), ["--squad", str(SQUAD), "--out", str(tmp_path / "o")])
    assert args.squad == [str(SQUAD)]


def test_lines_are_appended_and_a_line_cut_short_is_skipped(tmp_path: Path) -> None:
    book = tmp_path / "results" / "reads.jsonl"
    ledger.append_read({"file": "a", "n": 1}, book)
    ledger.append_read({"file": "b", "n": 2}, book)
    with book.open("a", encoding="utf-8") as f:
        f.write('{"file": "c", "n"')  # a crash in the middle of a line
    ledger.append_read({"file": "a", "n": 3}, book)
    rows = ledger.read_ledger(book)
    assert [r["n"] for r in rows] == [1, 2, 3]
    assert ledger.read_counts(rows) == {"a": 2, "b": 1}
    with pytest.raises(ValueError, match="cannot be written as JSON"):
        ledger.append_read({"file": "a", "figure": float("nan")}, book)
    assert len(ledger.read_ledger(book)) == 3


def test_the_ledger_is_the_checkouts_unless_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ledger.LEDGER_ENV, raising=False)
    assert ledger.default_ledger() == REPO / "results" / "eval_reads.jsonl"
    monkeypatch.setenv(ledger.LEDGER_ENV, str(tmp_path / "elsewhere.jsonl"))
    assert ledger.default_ledger() == tmp_path / "elsewhere.jsonl"


def test_qrag_eval_records_each_evaluation_read(tmp_path: Path, tiny_checkpoint: Path, tiny_encoder_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # One file is evaluation only by its bytes under a neutral name, one by its name; MultiRC's odd half by its rows.
    neutral = shutil.copyfile(SQUAD, tmp_path / "pool_a.json")
    named = tmp_path / "reddit_copy.json"
    named.write_text(json.dumps(json.loads(SQUAD.read_text())))  # the same questions in other bytes
    known = evaluation_only.EvaluationFile("squad_shifts/nyt_v1.0.json", "test", file_sha256(neutral))
    monkeypatch.setitem(evaluation_only._BY_HASH, known.sha256, known)
    multirc = tmp_path / "multirc_task.json"  # the fixture's well-formed examples, each half holding some
    examples = json.loads(MULTIRC.read_text())["examples"][:4]
    multirc.write_text(json.dumps({"name": "tiny multirc", "examples": examples}))
    book = tmp_path / "reads.jsonl"
    base = ["ordinary-text", "--model", str(tiny_checkpoint), "--encoder", str(tiny_encoder_path),
            "--sentence-models", "", "--ks", "1,2", "--search", "lexical_weight=0", "--ledger", str(book)]
    assert eval_main([*base, "--squad", str(neutral), "--squad", str(named), "--multirc", str(multirc),
                      "--half", "odd", "--out", str(tmp_path / "run")]) == 0
    rows = ledger.read_ledger(book)
    assert [(r["file"], r["recognised_by"], r["rows"]) for r in rows] == [
        ("squad_shifts/nyt_v1.0.json", ["content"], "all"), ("reddit_copy.json", ["name"], "all"),
        ("multirc_task.json", ["rows"], "odd half")]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for row, part in zip(rows, ("pool_a", "reddit_copy", "multirc"), strict=True):
        assert row["sha256"] == file_sha256(row["path"]) and row["model"].startswith(str(tiny_checkpoint))
        assert row["settings"]["ks"] == [1, 2] and row["settings"]["search"] == {"lexical_weight": 0}
        assert row["figures"]["bm25"] == pytest.approx(summary["parts"][part]["means"]["bm25"], abs=1e-4)
        assert row["finished"] and row["date"] and row["command"].startswith("qrag-eval ordinary-text")
    # a run on validation data alone records nothing; the ledger grows by appends only
    other = tmp_path / "pool_b.json"
    other.write_text(json.dumps(json.loads(SQUAD.read_text()), indent=3))
    assert eval_main([*base, "--squad", str(other), "--out", str(tmp_path / "run2")]) == 0
    assert ledger.read_ledger(book) == rows


def test_hotpotqa_test_rows_are_a_read_and_its_validation_rows_are_not(tmp_path: Path) -> None:
    from qrag.eval.sweep import RunConfig

    def reads(tasks: tuple[str, ...] | None) -> list[dict[str, object]]:
        cfg = RunConfig(benchmark="hotpotqa_pool", out=tmp_path, methods=("bm25",), tasks=tasks).validate()
        return ledger.benchmark_reads(cfg, None, ["hotpotqa_pool"])

    assert reads(("val",)) == []
    (row,) = reads(None)  # the default task is the test rows
    assert row["rows"] == "9 000-9 999 (test)" and row["recognised_by"] == ["content"] and not row["finished"]
    assert row["sha256"] == evaluation_only.HOTPOTQA_TEST.sha256 and row["file"] == evaluation_only.HOTPOTQA_TEST.name


def test_a_file_holding_evaluation_questions_in_another_layout_is_recognised_by_them(tmp_path: Path) -> None:
    rows = json.loads(fanoutqa_path("test").read_text(encoding="utf-8"))[:5]
    relaid = tmp_path / "team_questions.jsonl"  # another layout, another name: only the questions are the test's
    relaid.write_text("".join(json.dumps({"q": r["question"], "gold": ["x"]}) + "\n" for r in rows), encoding="utf-8")
    found = recognise(relaid)
    assert found is not None and found.by == ("questions",) and found.known is None
    assert [(f.count, f.line) for f in found.questions] == [(5, 1)] and "FanOutQA test" in found.questions[0].set_name


def test_a_release_line_is_no_read(tmp_path: Path) -> None:
    book = tmp_path / "reads.jsonl"
    ledger.append_read({"file": "a", "model": "m"}, book)
    ledger.append_read({"kind": "release", "files": ["a"], "date": "2026-12-02"}, book)
    assert ledger.read_counts(ledger.read_ledger(book)) == {"a": 1}
    shipped = ledger.read_ledger(REPO / "results" / "eval_reads.jsonl")
    released = [r for r in shipped if r.get("kind") == "release"]
    assert released and "fanoutqa/data/fanout-final-dev.json" in released[0]["files"]
