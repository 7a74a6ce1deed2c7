"""FanOutQA as a team's corpus (`scripts/fanoutqa_own_data.py`): its dev and test questions are evaluation only, so
the script writes them for evaluation and writes no training file from either."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from qrag.training.data.evaluation_only import recognise
from qrag.training.data.fanoutqa import questions
from tests.scripts import SCRIPTS, load_script

SCRIPT = SCRIPTS / "fanoutqa_own_data.py"


def _script() -> ModuleType:
    return load_script("fanoutqa_own_data")


def _run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *args])
    return int(_script().main())


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_script_writes_the_questions_for_evaluation_and_no_training_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fanoutqa"
    assert _run(monkeypatch, str(out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["corpus.jsonl", "dev_questions.jsonl", "test_questions.jsonl"]
    assert _rows(out / "test_questions.jsonl") == questions("test")
    printed = capsys.readouterr().out
    assert "test_questions.jsonl: 298 questions (EVALUATION ONLY" in printed
    assert "dev_questions.jsonl: 122 questions (a team's labelled questions" in printed
    found = recognise(out / "test_questions.jsonl")  # the bytes recorded; qrag-eval logs each read
    assert found is not None and found.by == ("content",)
    assert recognise(out / "dev_questions.jsonl") is None  # dev trains, tunes and selects since 2026-12-02


def test_dev_only_does_not_write_the_test_questions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(monkeypatch, str(tmp_path), "--dev-only") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "dev_questions.jsonl"]


@pytest.mark.parametrize("flag", [["--subset", "100"], ["--val-share", "0.2"]])
def test_flags_that_made_training_files_from_the_test_questions_are_refused_by_name(
        flag: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fanoutqa"
    with pytest.raises(SystemExit) as stop:
        _run(monkeypatch, str(out), *flag)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert flag[0] in err and "evaluation only" in err and "--data.train_path" in err
    assert not out.exists()
