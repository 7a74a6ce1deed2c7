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


@pytest.mark.slow
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
    assert {r["num_retrieved"] for r in records if r["method"] != "qrag+stop"} == {demo.PAPER_BUDGET}
    for name in ("table.md", "plot.png", "margins.md", "summary.json", "main_job.md"):
        assert (tmp_path / "eval" / name).stat().st_size > 0


def test_main_job_rejects_bad_flags(tmp_path: Path) -> None:
    for bad in (["--lengths", "3q"], ["--samples", "0"], ["--train-minutes", "-1"], ["--model", "qrag/nope"],
                ["--train-layers", "6"], ["--train-layers", "0"], ["--train-layers", "1", "--model", "qrag/babilong-minilm-cpu"]):
        with pytest.raises(SystemExit) as e:
            demo.main([*bad, "--output-dir", str(tmp_path)])
        assert e.value.code == 2
    assert not (tmp_path / "job.json").exists()  # nothing was started


@pytest.mark.slow
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


def test_one_budget_6_retrieval_gives_both_tables_by_hand() -> None:
    """A greedy method's first |SF| chunks are its |SF|-budget answer; qrag+stop keeps its own count."""
    def rec(method: str, sample: str, retrieved: list[int], supporting: list[int]) -> dict[str, Any]:
        sf = set(supporting)
        return {"method": method, "task": "qa2", "length": "1k", "id": sample, "retrieved": retrieved,
                "fact_em": float(sf <= set(retrieved)), "fact_em_at_sf": float(sf <= set(retrieved[: len(sf)]))}

    records = [rec("qrag", "a", [3, 7, 1, 0, 2, 4], [3, 7]), rec("qrag", "b", [3, 1, 7, 0, 2, 4], [3, 7]),
               rec("qrag+stop", "a", [3, 7, 1], [3, 7]), rec("qrag+stop", "b", [3, 1], [3, 7])]
    for m in ("bm25", "dense", "multihop"):
        records += [rec(m, "a", [1, 3, 0, 2, 4, 5], [3, 7]), rec(m, "b", [0, 1, 2, 4, 5, 6], [3, 7])]
    sf = {(r["method"], r["id"]): r["fact_em"] for r in demo.at_sf(records)}
    assert sf[("qrag", "a")] == 1.0 and sf[("qrag", "b")] == 0.0  # 7 came third: not within |SF| = 2
    assert sf[("qrag+stop", "a")] == 1.0 and sf[("qrag+stop", "b")] == 0.0  # its own stop, not the first |SF|
    report = demo.results_report(records, 2, ["1k"])
    at_sf_table, budget_table = report.split("the paper's budget")
    # Two samples: the mean and its 95% Wilson interval, in two decimals (1 of 2: 0.095-0.905; 2 of 2: 0.342-1).
    assert "| 1k | qrag | - | 0.50 [0.09, 0.91] | - | - | - | 0.50 [0.09, 0.91] |" in at_sf_table
    assert "| 1k | qrag | - | 1.00 [0.34, 1.00] | - | - | - | 1.00 [0.34, 1.00] |" in budget_table
    assert "qa2 1k: 0.500 vs" in report  # the margin is at |SF| chunks


def test_the_plan_keeps_every_sample_when_training_keeps_its_share_and_scales_them_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "MIN_TRAIN_SHARE", 0.6)
    monkeypatch.setattr(demo, "EVAL_SENTENCES_PER_SAMPLE", 30.0)
    monkeypatch.setattr(demo, "CHAIN_SECONDS", 40.0)
    monkeypatch.setattr(demo, "SLACK_SECONDS", 20.0)
    # A 900 s budget, 60 s spent, 15 test episodes per unit of samples, 3 000 held-out sentences to embed.
    # 600 sentences/s: fixed 60 + 5 + 40 + 20 = 125 s, evaluation 30 * 15 / 600 = 0.75 s per sample, so 200
    # samples take 150 s and training keeps 625 s >= 0.6 * 900 = 540 s.
    assert demo.plan_samples(900, 60, 600, 200, 15, 3000) == (200, 625)
    # 300 sentences/s: fixed 130 s, 1.5 s per sample; 200 samples would leave 470 s, so the evaluation gets
    # 900 - 130 - 540 = 230 s: 153 samples, and training 900 - 130 - 229.5 = 540.5 s.
    assert demo.plan_samples(900, 60, 300, 200, 15, 3000) == (153, 540.5)
    # 30 sentences/s: fixed 220 s, 15 s per sample: never fewer than MIN_SAMPLES (20), training gets what is left.
    assert demo.plan_samples(900, 60, 30, 200, 15, 3000) == (20, 380)
    assert demo.plan_samples(900, 60, 30, 5, 15, 3000) == (5, 605)  # fewer asked than the floor: as asked


@pytest.mark.slow
@pytest.mark.usefixtures("bf16_as_native")
def test_in_fp32_the_state_tower_trains_its_blocks_not_its_embeddings(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int, str]] = []

    def record(config: Any, *a: Any, **k: Any) -> Any:
        seen.append((config.model.train_mode, config.model.trainable_layers, config.trainer.mixed_precision))
        raise KeyboardInterrupt  # the test needs the config, not the training

    monkeypatch.setattr(demo, "Trainer", record)
    for precision in ("fp32", "bf16"):  # the tests treat this CPU as having native bf16 (tests/conftest.py)
        assert demo.main([*ARGS, "--precision", precision, "--output-dir", str(tmp_path / precision)]) == 130
    assert seen == [("top_layers", demo.FP32_TRAINABLE_LAYERS, "no"), ("full", 2, "bf16")]


@pytest.mark.slow
def test_train_layers_trains_the_top_layers_on_a_frozen_trunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int]] = []

    def record(config: Any, *a: Any, **k: Any) -> Any:
        seen.append((config.model.train_mode, config.trainer.train_layers))
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "Trainer", record)
    assert demo.main([*ARGS, "--precision", "fp32", "--train-layers", "2", "--output-dir", str(tmp_path)]) == 130
    assert seen == [("full", 2)]  # in fp32 too: the trunk's split replaces the frozen embeddings'

