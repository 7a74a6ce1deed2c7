"""Training as two CPU processes (gloo) under torch.distributed's launcher, the way `accelerate launch`
starts them on GPUs: the update equals one process's on the same global batch, every rank holds the same
networks, each rank plays its own shard, only rank 0 writes, resume is exact across processes, and a
killed rank leaves a resumable `last/`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from qrag.training.learn.checkpoint_files import find_last, read_checkpoint
from qrag.training.learn.config import TrainConfig
from qrag.training.learn.trainer import Trainer
from tests.conftest import make_tiny_encoder
from tests.training.learn.multiprocess_worker import NUM_EPISODES, fixed_batch
from tests.training.learn.two_hop import make_two_hop_episodes

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[3]
WORKER = Path(__file__).with_name("multiprocess_worker.py")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random BERT without dropout, so one process and two see the same function."""
    folder = make_tiny_encoder(tmp_path_factory.mktemp("tiny-no-dropout"))
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def make_config(encoder: Path, out: Path, **trainer: Any) -> TrainConfig:
    model = trainer.pop("model", {})
    return TrainConfig.from_dict({
        "model": {"encoder": str(encoder), "max_chunk_tokens": 16, "max_state_piece_tokens": 16, **model},
        "env": {"max_hops": 2},
        "rl": {"lam": 0.5, "alpha": 0.05, "tau": 0.25},
        "optim": {"lr": 1e-3, "warmup_steps": 1, "schedule": "constant"},
        "trainer": {"output_dir": str(out), "total_transitions": 32, "num_envs": 2, "rollout_steps": 2,
                    "minibatch_size": 4, "eval_every": 16, "save_every": 8, "log_every": 8, "progress": False,
                    "cpu": True, "threads": 1, **trainer},
    })


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(mode: str, config: TrainConfig, out: Path) -> subprocess.Popen[bytes]:
    """Two processes of the worker on this machine, rendezvous on a free local port."""
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / f"{mode}-{time.monotonic_ns()}.yaml"
    config.to_yaml(config_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(WORKER), mode, str(config_path), str(out)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def run(mode: str, config: TrainConfig, out: Path, timeout: float = 300) -> list[dict[str, Any]]:
    proc = launch(mode, config, out)
    log, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, log.decode(errors="replace")[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def rank_weights(out: Path, rank: int) -> dict[str, torch.Tensor]:
    return load_file(str(out / f"rank{rank}.safetensors"))


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float, what: str) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol, msg=f"{what}: {name} differs")


@pytest.mark.parametrize("groups", [1, 2])  # 2: each rank's minibatch in length groups, gradients averaged once
def test_two_processes_make_one_process_update_on_the_global_batch(encoder: Path, tmp_path: Path, groups: int) -> None:
    run("update", make_config(encoder, tmp_path / "run", minibatch_size=4, length_groups=groups), tmp_path / "two")
    two = [rank_weights(tmp_path / "two", r) for r in range(2)]
    assert_same(two[0], two[1], 0.0, "rank 0 vs rank 1")  # online and target towers identical across ranks

    one = Trainer(make_config(encoder, tmp_path / "one-run", minibatch_size=8), make_two_hop_episodes(NUM_EPISODES, 0))
    before = {k: v.clone() for k, v in one.online.state_dict().items()}
    one.update(fixed_batch(8))  # the same 8 rows in one minibatch: one optimiser step
    assert one.updates == 1
    reference = {**{f"online.{k}": v for k, v in one.online.state_dict().items()},
                 **{f"target.{k}": v for k, v in one.target.state_dict().items()}}
    assert_same(two[0], reference, 1e-6, "two processes vs one")
    moved = [k for k, v in one.online.state_dict().items() if not torch.equal(v, before[k])]
    assert moved, "the reference step changed nothing: the comparison would prove nothing"


def test_two_process_training_shards_writes_once_and_resumes_exactly(encoder: Path, tmp_path: Path) -> None:
    lora = {"model": {"train_mode": "lora", "lora_rank": 4}}  # random adapters: ranks must start from rank 0's
    ranks = run("train", make_config(encoder, tmp_path / "a", **lora), tmp_path / "a-out")
    assert all(r["world"] == 2 and r["transitions"] == 32 for r in ranks)
    assert_same(rank_weights(tmp_path / "a-out", 0), rank_weights(tmp_path / "a-out", 1), 0.0, "rank 0 vs rank 1")
    # Each rank plays its own shard: rank r the episodes r, r+2, r+4, ...
    assert ranks[0]["played"] and all(i % 2 == 0 for i in ranks[0]["played"])
    assert ranks[1]["played"] and all(i % 2 == 1 for i in ranks[1]["played"])
    # Only rank 0 writes: checkpoints (last/) and the best model.
    assert ranks[1]["writes"] == []
    assert "checkpoint last" in ranks[0]["writes"] and "model best" in ranks[0]["writes"]
    _, state = read_checkpoint(tmp_path / "a" / "last")
    assert state["world_size"] == 2 and set(state["rank_env"]) == {"1"}

    # The same run stopped after 16 transitions and resumed by two new processes ends where it did.
    run("train", make_config(encoder, tmp_path / "b", total_transitions=16, **lora), tmp_path / "b1-out")
    resumed = run("train", make_config(encoder, tmp_path / "b", resume=True, **lora), tmp_path / "b2-out")
    assert [r["transitions"] for r in resumed] == [32, 32] and resumed[0]["updates"] == ranks[0]["updates"]
    assert_same(rank_weights(tmp_path / "a-out", 0), rank_weights(tmp_path / "b2-out", 0), 1e-6, "resumed vs whole")
    assert_same(rank_weights(tmp_path / "b2-out", 0), rank_weights(tmp_path / "b2-out", 1), 0.0, "resumed ranks")


def test_killed_rank_leaves_a_resumable_last(encoder: Path, tmp_path: Path) -> None:
    out, run_dir = tmp_path / "kill-out", tmp_path / "run"
    proc = launch("train", make_config(encoder, run_dir, total_transitions=10**6, eval_every=0), out)
    try:
        deadline = time.monotonic() + 240
        while find_last(run_dir) is None or not (out / "rank1.pid").is_file():
            assert proc.poll() is None, (proc.stdout.read() if proc.stdout else b"").decode(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no checkpoint written in time"
            time.sleep(0.2)
        time.sleep(1.0)  # let training go on past the first checkpoint
        os.kill(int((out / "rank1.pid").read_text()), signal.SIGKILL)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0  # the launcher reports the lost rank and stops the other one

    last = find_last(run_dir)
    assert last is not None
    _, state = read_checkpoint(last)
    saved = int(state["transitions"])
    assert saved >= 8 and state["world_size"] == 2
    ranks = run("train", make_config(encoder, run_dir, total_transitions=saved + 8, eval_every=0, resume=True),
                tmp_path / "resume-out")
    assert [r["transitions"] for r in ranks] == [saved + 8] * 2
    assert_same(rank_weights(tmp_path / "resume-out", 0), rank_weights(tmp_path / "resume-out", 1), 0.0, "ranks")


def test_time_budget_stops_every_rank_together(encoder: Path, tmp_path: Path) -> None:
    # Each rank reads its own clock; were they to disagree, one would leave the loop while the other waits
    # for it in the next gradient all-reduce.
    config = make_config(encoder, tmp_path / "run", total_transitions=10**6, eval_every=0, max_minutes=0.1)
    ranks = run("train", config, tmp_path / "out", timeout=240)
    assert ranks[0]["transitions"] == ranks[1]["transitions"] < 10**6
    _, state = read_checkpoint(tmp_path / "run" / "last")
    assert state["transitions"] == ranks[0]["transitions"]
