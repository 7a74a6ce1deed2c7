"""One process of a multi-process training test, started by `torch.distributed.run` from
tests/training/learn/test_multiprocess.py (never collected by pytest itself).

    python -m torch.distributed.run --nproc_per_node 2 tests/training/learn/multiprocess_worker.py MODE CONFIG OUT

MODE `update`: one optimiser step on this rank's half of a fixed global batch (`fixed_batch`).
MODE `train`: `Trainer.train()` on CONFIG. Either way the rank writes what the test compares to OUT:
`rank{r}.safetensors` (online and target weights), `rank{r}.json` (who wrote which files, which training
episodes the rank played, the summary) and `rank{r}.pid` (so a test can kill one rank).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from qrag.training.learn import resume as resume_module
from qrag.training.learn import trainer as trainer_module
from qrag.training.learn.config import load_yaml
from qrag.training.model.qnet import QNetwork
from tests.training.learn.two_hop import make_two_hop_episodes

NUM_EPISODES = 24


def fixed_batch(rows: int) -> dict[str, Any]:
    """`rows` (state, taken chunk, λ-return) transitions, the same in every process (no random draws)."""
    episodes = make_two_hop_episodes(rows, 5)
    return {
        "questions": [ep.question for ep in episodes],
        "rendered": [list(ep.chunks[: i % 2]) for i, ep in enumerate(episodes)],
        "chunks": [ep.chunks[(3 * i) % len(ep.chunks)] for i, ep in enumerate(episodes)],
        "positions": torch.zeros(rows),
        "returns": torch.linspace(-1.0, 1.0, rows),
    }


def weights(trainer: trainer_module.Trainer) -> dict[str, torch.Tensor]:
    online = {f"online.{k}": v for k, v in trainer.online.state_dict().items()}
    target = {f"target.{k}": v for k, v in trainer.target.state_dict().items()}
    return {k: v.detach().cpu().contiguous() for k, v in {**online, **target}.items()}


def main(mode: str, config_path: str, out: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"rank{rank}.pid").write_text(str(os.getpid()))
    writes: list[str] = []
    write_checkpoint, save_pretrained = resume_module.write_checkpoint, QNetwork.save_pretrained

    def logged_write(target: Path, *args: Any) -> None:
        writes.append(f"checkpoint {Path(target).name}")
        write_checkpoint(target, *args)

    def logged_save(self: QNetwork, directory: str | Path, extra_files: dict[str, str] | None = None) -> Path:
        writes.append(f"model {Path(directory).name}")
        return save_pretrained(self, directory, extra_files)

    resume_module.write_checkpoint = logged_write  # type: ignore[assignment]
    QNetwork.save_pretrained = logged_save  # type: ignore[method-assign]

    config = load_yaml(config_path)
    trainer = trainer_module.Trainer(config, make_two_hop_episodes(NUM_EPISODES, 0), make_two_hop_episodes(4, 1))
    played: list[int] = []
    sample = trainer.env.sampler
    assert sample is not None
    played.extend(s.episode_index for s in trainer.env.slots if s is not None)
    trainer.env.sampler = lambda: played.append(sample()) or played[-1]  # type: ignore[func-returns-value]
    summary: dict[str, Any] = {}
    if mode == "update":
        world = trainer.accelerator.num_processes
        batch = fixed_batch(config.trainer.minibatch_size * world)
        rows = slice(rank * config.trainer.minibatch_size, (rank + 1) * config.trainer.minibatch_size)
        local = {k: v[rows] for k, v in batch.items()}
        summary = trainer.update(local)
    else:
        summary = trainer.train()
    save_file(weights(trainer), str(out_dir / f"rank{rank}.safetensors"))
    (out_dir / f"rank{rank}.json").write_text(json.dumps({
        "writes": writes, "played": played, "world": trainer.accelerator.num_processes,
        "transitions": trainer.transitions, "updates": trainer.updates, "summary": summary,
    }, default=str), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:4])
