"""The one entry point: every source by name, clear errors, byte-identical output in a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from qrag.training.data import SOURCES, load_episodes, read_jsonl
from qrag.training.learn.cli.data import main

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[3]

_DUMP = """
import json, sys
from qrag.training.data import load_episodes
for source, kw in json.loads(sys.argv[1]):
    for ep in load_episodes(source, **kw):
        print(json.dumps(ep.to_json(), ensure_ascii=False))
"""
CASES = [
    ("babi", {"task": "qa3", "num_samples": 20, "seed": 7}),
    ("babilong", {"task": "qa2", "num_samples": 2, "num_sentences": 90, "seed": 5}),
    ("ruler_niah", {"task": "niah_multikey_1", "num_samples": 2, "num_sentences": 60, "seed": 5}),
    ("ruler_niah", {"task": "niah_multikey_3", "num_samples": 2, "num_tokens": 1000, "seed": 5}),
]


def _dump_here() -> str:
    lines = []
    for source, kw in CASES:
        for ep in load_episodes(source, **kw):  # type: ignore[arg-type]
            lines.append(json.dumps(ep.to_json(), ensure_ascii=False))
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_same_arguments_give_byte_identical_episodes_in_a_new_process() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _DUMP, json.dumps(CASES)], capture_output=True, text=True, cwd=REPO,
        env={"PYTHONHASHSEED": "123", "PATH": "", "HOME": str(Path.home())}, check=True,
    ).stdout
    assert out == _dump_here()


def test_babi_and_babilong_by_name() -> None:
    eps = load_episodes("babi", task="qa2", num_samples=5, seed=0)
    assert len(eps) == 5 and all(e.metadata["task"] == "qa2" for e in eps)
    assert load_episodes("babi", task="qa2", num_samples=5, seed=0, split="test") != eps
    long = load_episodes("babilong", task="qa1", num_samples=2, num_sentences=70, seed=0)
    assert [e.num_chunks for e in long] == [70, 70]
    assert len(load_episodes("babi", task="qa1")) == 100  # generator default


def test_babi_file_and_jsonl_by_name(tmp_path: Path) -> None:
    eps = load_episodes("babi_file", path=str(FIXTURES / "qa2_two-supporting-facts_test.txt"))
    assert [e.answer for e in eps] == ["garden", "garden", "hallway"]
    out = tmp_path / "x.jsonl"
    assert main(["babi", "--task", "qa4", "--num-samples", "3", "--out", str(out)]) == 0
    assert read_jsonl(out) == load_episodes("babi", task="qa4", num_samples=3)
    assert load_episodes("jsonl", path=str(out)) == read_jsonl(out)


def test_every_source_is_listed() -> None:
    assert set(SOURCES) == {
        "babi", "babi_file", "babilong", "babilong_file", "ruler_niah", "ruler_qa", "hotpotqa", "2wiki",
        "musique", "jsonl", "wiki", "hotpotqa_pool", "corpus",
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "babylon"}, r"unknown data source 'babylon'; valid sources: babi, babi_file, babilong"),
        ({"source": "babi", "task": "qa7"}, r"unknown task 'qa7' for source 'babi'; valid tasks: qa1"),
        ({"source": "babi"}, r"source 'babi' needs a task"),
        ({"source": "ruler_niah", "task": "niah_single_9"}, r"'niah_single_9'.*niah_single_1"),
        ({"source": "babi", "task": "qa1", "colour": 1}, r"unknown option\(s\) \['colour'\]"),
        ({"source": "hotpotqa"}, r"needs path=.*or hub_id"),
        ({"source": "babi", "task": "qa1", "split": "dev"}, r"unknown split 'dev'; valid splits: train, test"),
        ({"source": "babilong", "task": "qa3", "num_sentences": 3}, r"num_sentences=3 is too small"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_episodes(**kwargs)


def test_missing_file_is_named() -> None:
    with pytest.raises(FileNotFoundError, match="no_such.json"):
        load_episodes("hotpotqa", path="no_such.json")


def test_cli_reports_errors_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["babilong", "--task", "qa9"]) == 2
    assert "unknown task 'qa9'" in capsys.readouterr().err
    assert main(["--list"]) == 0
    assert "ruler_niah" in capsys.readouterr().out
