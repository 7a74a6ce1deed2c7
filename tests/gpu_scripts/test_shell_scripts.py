"""scripts/gpu/train.sh and scale_eval.sh as a user runs them (docs/GPU_GUIDE.md), at CPU size.

Tiny random encoder, 20-sentence haystacks, a few transitions: the scripts' plumbing (environment checks, run
folders in $RUNS, resuming by running again, the scale evaluation of what training wrote) on a CPU, where a
GPU is not needed to prove it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY_TRAIN = ("--trainer.cpu --data.num_train 8 --data.num_val 4 --data.num_sentences 20 --trainer.num_envs 2 "
              "--trainer.rollout_steps 4 --trainer.minibatch_size 8 --trainer.eval_every 8 --trainer.save_every 8 "
              "--trainer.log_every 8 --trainer.encode_batch_size 32 --trainer.mixed_precision no "
              "--trainer.total_transitions 8 --model.lora_target_modules query value")


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu" / script)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done


@pytest.mark.slow
def test_train_resume_and_scale_eval_scripts(tmp_path: Path, tiny_encoder_path: Path) -> None:
    runs = tmp_path / "runs"
    encoder = f" --model.encoder {tiny_encoder_path}"
    env = {**os.environ, "PYTHON": sys.executable, "RUNS": str(runs), "OMP_NUM_THREADS": "1",
           "QA_MINUTES": "5", "QA_ALL_MINUTES": "0", "NIAH_MINUTES": "5",
           "QA_ARGS": TINY_TRAIN + encoder, "NIAH_ARGS": TINY_TRAIN + encoder}
    env.pop("QRAG_TEXT_PACK", None)
    first = _run("train.sh", env)
    assert "== qa15all: skipped (0 minutes)" in first.stdout
    for name in ("qa15", "niah"):
        for part in ("best/model.safetensors", "last/trainer_state.json", "config.yaml", "metrics.jsonl", "train.log"):
            assert (runs / name / part).is_file(), (name, part)
        assert json.loads((runs / name / "last" / "trainer_state.json").read_text())["transitions"] == 8
    assert not (runs / "qa15all").exists()

    env2 = {**env, "NIAH_MINUTES": "0", "QA_ARGS": env["QA_ARGS"].replace("total_transitions 8", "total_transitions 16")}
    again = _run("train.sh", env2)
    assert f"resumed from {runs / 'qa15' / 'last'} at 8 transitions" in again.stdout
    assert json.loads((runs / "qa15" / "last" / "trainer_state.json").read_text())["transitions"] == 16
    assert (runs / "qa15" / "train.log").read_text().count("== qa15: exit 0") == 2  # the log keeps both runs

    small = "--lengths 1k --num-samples 1 --samples-at= --batch-size 2"
    env3 = {**env, "DEVICE": "cpu", "QA_ARGS": f"--tasks qa1 {small} --speed-lengths 1k --speed-hops 1-2 --speed-queries 2",
            "NIAH_ARGS": f"--tasks niah_single_1 {small.replace('1k', '4k')}"}
    _run("scale_eval.sh", env3)
    scale = runs / "scale"
    assert sorted(p.name for p in scale.iterdir()) == ["babilong", "niah", "scale_eval.log"]
    methods = ["qrag", "qrag+stop", "dense", "cosine", "bm25"]
    babilong = json.loads((scale / "babilong" / "summary.json").read_text())
    assert babilong["methods"] == methods and babilong["lengths"] == ["1k"]
    assert babilong["settings"]["model"] == str(runs / "qa15" / "best") and babilong["settings"]["precision"] == "fp32"
    speed = json.loads((scale / "babilong" / "speed.json").read_text())
    assert [h["hops"] for h in speed["lengths"][0]["hops"]] == [1, 2] and speed["lengths"][0]["chunks"] == 50
    niah = json.loads((scale / "niah" / "summary.json").read_text())
    assert niah["settings"]["model"] == str(runs / "niah" / "best") and niah["settings"]["tasks"] == ["niah_single_1"]
    assert not (scale / "niah" / "speed.json").exists()
    # Running it again resumes: every sample is already in results.jsonl, so nothing is added.
    before = (scale / "babilong" / "results.jsonl").read_text()
    _run("scale_eval.sh", {**env3, "QA_ARGS": env3["QA_ARGS"].replace("--speed-lengths 1k", "--speed-lengths=")})
    assert (scale / "babilong" / "results.jsonl").read_text() == before


def test_scripts_stop_with_the_install_command_when_qrag_is_missing(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu" / "train.sh")], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": str(fake), "RUNS": str(tmp_path / "runs")}, timeout=60)
    assert done.returncode == 1
    assert "pip install -e '.[eval]'" in done.stderr
    assert not (tmp_path / "runs").exists()
