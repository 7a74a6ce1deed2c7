"""The main job end to end at toy size: every phase runs, an interrupted run resumes without redoing work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qrag.eval import demo
from qrag.eval.runner import read_results

ARGS = ["--samples", "2", "--num-train", "10", "--num-val", "5", "--lengths", "1k", "--train-minutes", "0.05",
        "--reader", "none", "--minutes", "5", "--threads", "2"]


def test_main_job_runs_every_phase_and_resumes_after_an_interrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args = [*ARGS, "--output-dir", str(tmp_path)]
    real_run = demo.run

    def interrupted(cfg: Any, **kw: Any) -> Any:
        real_run(cfg, stop_after=7, **kw)  # seven records land, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run", interrupted)
    assert demo.main(args) == 130
    assert "run the same command to resume" in capsys.readouterr().out
    assert len(read_results(tmp_path / "eval" / "results.jsonl")) == 7
    job = json.loads((tmp_path / "job.json").read_text())
    assert job["done"] == ["train"] and job["seconds"]["eval"] > 0
    assert (tmp_path / "train" / "best" / "model.safetensors").is_file()

    monkeypatch.setattr(demo, "run", real_run)
    monkeypatch.setattr(demo, "Trainer", lambda *a, **k: pytest.fail("a finished training must not run again"))
    assert demo.main(args) == 0
    out = capsys.readouterr().out
    records = read_results(tmp_path / "eval" / "results.jsonl")
    assert len(records) == len({r["key"] for r in records}) == 5 * 2 * len(demo.METHODS)  # tasks × samples × methods
    assert {r["method"] for r in records} == set(demo.METHODS)
    cached = next(line for line in out.splitlines() if "distinct sentences" in line)
    words = cached.split()  # "N distinct sentences, M already cached"
    assert words[0] == words[3]  # every chunk vector came from the saved cache
    assert "Held-out fact EM" in out and "hop 0: Q=" in out
    for name in ("table.md", "plot.png", "margins.md", "summary.json"):
        assert (tmp_path / "eval" / name).stat().st_size > 0


def test_main_job_rejects_bad_flags(tmp_path: Path) -> None:
    for bad in (["--lengths", "3q"], ["--samples", "0"], ["--train-minutes", "-1"], ["--model", "qrag/nope"]):
        with pytest.raises(SystemExit) as e:
            demo.main([*bad, "--output-dir", str(tmp_path)])
        assert e.value.code == 2
    assert not (tmp_path / "job.json").exists()  # nothing was started


def test_main_job_serves_a_shipped_model_without_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo, "Trainer", lambda *a, **k: pytest.fail("--model must not train"))
    args = [*ARGS, "--output-dir", str(tmp_path), "--model", "qrag/babilong-minilm-cpu"]
    assert demo.main(args) == 0
    out = capsys.readouterr().out
    assert "skipped: evaluating qrag/babilong-minilm-cpu" in out and "hop 0: Q=" in out
    assert not (tmp_path / "train").exists()
    records = read_results(tmp_path / "eval" / "results.jsonl")
    assert {r["method"] for r in records} == set(demo.METHODS) and len(records) == 5 * 2 * len(demo.METHODS)
    assert json.loads((tmp_path / "job.json").read_text())["model"] == "qrag/babilong-minilm-cpu"
    for other in ([], ["--model", "qrag/babilong-minilm"]):  # the folder holds this model's results only
        with pytest.raises(SystemExit) as e:
            demo.main([*ARGS, "--output-dir", str(tmp_path), *other])
        assert e.value.code == 2
    assert "holds the results of qrag/babilong-minilm-cpu" in capsys.readouterr().err
