"""Evaluation-only files never train, tune or select: `qrag-train` (training and validation files) and `qrag-adapt`
(`--questions`) refuse them by their bytes, under any name, or by their name, before any work; other files pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qrag.training.data import write_jsonl
from qrag.training.data.evaluation_only import EvaluationOnlyError, refuse_evaluation_only
from qrag.training.data.fanoutqa import fanoutqa_path, questions
from qrag.training.learn.adapt.cli import main as adapt_main
from qrag.training.learn.cli.train import main as train_main
from qrag.training.learn.cli.train import parse_config
from tests.training.learn.two_hop import make_two_hop_episodes


@pytest.fixture()
def own_file(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    write_jsonl(make_two_hop_episodes(4, 0), path)
    return path


@pytest.fixture()
def test_questions(tmp_path: Path) -> Path:
    """FanOutQA's test questions as scripts/fanoutqa_own_data.py writes them, under a team's name for its own."""
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in questions("test")), encoding="utf-8")
    return path


@pytest.mark.parametrize("flag", ["--data.train_path", "--data.val_path"])
def test_qrag_train_refuses_a_renamed_copy_of_an_evaluation_file(
        flag: str, tmp_path: Path, own_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = shutil.copyfile(fanoutqa_path("test"), tmp_path / "my_questions.json")
    out = tmp_path / "run"
    paths = {"--data.train_path": own_file, "--data.val_path": None, flag: copy}
    args = ["--data.source", "jsonl", "--trainer.output_dir", str(out)]
    for name, path in paths.items():
        args += [name, str(path)] if path is not None else []
    assert train_main(args) == 2
    err = capsys.readouterr().err
    assert f"{flag} {str(copy)!r} is fanoutqa/data/fanout-final-test.json (fanoutqa==1.1.1), known by its bytes" in err
    assert "nothing trains, tunes or selects on it" in err and "Train and validate on your own questions" in err
    assert not out.exists()


def test_qrag_train_refuses_the_question_files_built_from_fanoutqa(
        tmp_path: Path, test_questions: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus.jsonl"  # the passages are no evaluation file; the questions are
    corpus.write_text('{"id": "a", "text": "x"}\n', encoding="utf-8")
    assert train_main(["--data.source", "corpus", "--data.corpus", str(corpus), "--data.train_path",
                       str(test_questions), "--trainer.output_dir", str(tmp_path / "run")]) == 2
    assert "is test_questions.jsonl (scripts/fanoutqa_own_data.py (FanOutQA test)), known by its bytes" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("layout", ["jsonl", "csv", "json"])
def test_evaluation_questions_in_another_layout_are_refused_by_their_text(tmp_path: Path, layout: str) -> None:
    # FanOutQA's test questions re-written, re-cased and re-punctuated: other bytes, other name, the same questions
    rows = [{"question": r["question"].upper().rstrip("?") + " ?", "supporting": r["supporting"]}
            for r in questions("test")[:3]]
    path = tmp_path / f"team.{layout}"
    if layout == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif layout == "csv":
        path.write_text("question,passage\n" + "".join(f'"{r["question"]}",{r["supporting"][0]}\n' for r in rows),
                        encoding="utf-8")
    else:
        path.write_text(json.dumps({"queries": {str(i): r["question"] for i, r in enumerate(rows)}}), encoding="utf-8")
    with pytest.raises(EvaluationOnlyError, match=r"holds evaluation-only questions, known by their text in any "
                                                  r"layout: 3 of FanOutQA test .*'s questions \(line 2"
                       if layout == "csv" else r"3 of FanOutQA test"):
        refuse_evaluation_only(path, "--questions", "Use your own")


def test_fanoutqa_dev_is_a_teams_labelled_questions_and_trains(tmp_path: Path, own_file: Path) -> None:
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps(r) + "\n" for r in questions("dev")), encoding="utf-8")
    refuse_evaluation_only(dev, "--questions", "unused")  # passes: neither its bytes, its name nor its text
    refuse_evaluation_only(shutil.copyfile(fanoutqa_path("dev"), tmp_path / "d.json"), "--questions", "unused")
    refuse_evaluation_only(own_file, "--questions", "unused")


def test_a_name_alone_marks_a_file_and_the_message_says_how_to_unmark_it(own_file: Path, tmp_path: Path) -> None:
    named = shutil.copyfile(own_file, tmp_path / "reddit_qa.jsonl")
    with pytest.raises(EvaluationOnlyError, match=r"by its name \(it holds 'reddit'.*a name without 'reddit'\.$"):
        refuse_evaluation_only(named, "--data.train_path", "Use your own")


def test_qrag_train_takes_other_files(own_file: Path, tmp_path: Path) -> None:
    config = parse_config(["--data.source", "jsonl", "--data.train_path", str(own_file), "--data.val_path",
                           str(own_file), "--trainer.output_dir", str(tmp_path / "run")])
    assert config.data.train_path == str(own_file) and config.data.val_path == str(own_file)


def test_qrag_adapt_refuses_evaluation_questions_and_takes_others(
        tmp_path: Path, test_questions: Path, own_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus, out = tmp_path / "passages.jsonl", tmp_path / "out"
    corpus.write_text('{"id": "a", "text": "x"}\n', encoding="utf-8")
    copy = shutil.copyfile(fanoutqa_path("test"), tmp_path / "team.json")
    for given, known in ((test_questions, "test_questions.jsonl"), (copy, "fanoutqa/data/fanout-final-test.json")):
        assert adapt_main(["--corpus", str(corpus), "--out", str(out), "--questions", str(given)]) == 2
        err = capsys.readouterr().err
        assert f"--questions {str(given)!r} is {known}" in err and "Give your own labelled questions" in err
        assert not out.exists()
    # another file passes the guard, and is stopped by the next check
    assert adapt_main(["--corpus", str(corpus), "--out", str(out), "--questions", str(own_file), "--threads", "0"]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err
