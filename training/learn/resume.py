"""What a run saves to `output_dir/last` and restores from it, bit for bit (the `Trainer`'s checkpoints).

What is saved: the online network (its own folder), the target towers' trained tensors, the optimiser, the
scheduler step, every random stream, the counters, the environments' slots and each process's share of them.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from qrag.training.learn.checkpoint_files import (
    MODEL_DIR,
    ResumeError,
    find_last,
    optimizer_from_tensors,
    optimizer_to_tensors,
    read_checkpoint,
    resume_guard,
    write_checkpoint,
)
from qrag.training.learn.checkpoint_selection import Selection, TaskSampler
from qrag.training.learn.config import TrainConfig
from qrag.training.learn.distributed import gather_rank_states, own_entries, rank_entries
from qrag.training.learn.env import RetrievalEnv
from qrag.training.model.folder import read_weights
from qrag.training.model.qnet import WEIGHTS_FILE, QNetwork


class Resumable:
    """The checkpoint half of `Trainer`: the state below is what it saves and restores."""

    config: TrainConfig
    accelerator: Accelerator
    output_dir: Path
    target: QNetwork
    optimizer: Any
    scheduler: Any
    env: RetrievalEnv
    sample_gen: torch.Generator
    act_gen: torch.Generator
    transitions: int
    updates: int
    selection: Selection
    recent: deque[tuple[float, float, bool]]
    task_sampler: TaskSampler | None
    resumed_from: Path | None

    @property
    def online(self) -> QNetwork:
        raise NotImplementedError

    def _prepare_output_dir(self) -> None:
        tc = self.config.trainer
        last = find_last(self.output_dir)
        if tc.resume and last is not None:
            self.load_checkpoint(last)
            self.resumed_from = last
        elif last is not None:
            raise ResumeError(
                f"{str(self.output_dir)!r} already holds a run; pass --resume to continue it, or choose another "
                "trainer.output_dir (nothing was overwritten)."
            )
        if self.accelerator.is_main_process:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            self.config.to_yaml(self.output_dir / "config.yaml")

    def save_checkpoint(self) -> None:
        """Write `output_dir/last` atomically: model, target, optimiser, RNG, counters, environments.

        Across processes the networks and optimiser are the same on every rank; each rank's environments and
        random streams differ, so they are gathered and rank 0 alone writes them all.
        """
        self.accelerator.wait_for_everyone()
        rng = {"torch": torch.get_rng_state(), "sample": self.sample_gen.get_state(), "act": self.act_gen.get_state()}
        ranks = gather_rank_states(self.accelerator, self.env.state_dict(), rng)
        if not self.accelerator.is_main_process:
            return
        opt_tensors, opt_rest = optimizer_to_tensors(self.optimizer.state_dict())
        trained = set(self.online.trainable_state_dict())  # the target's copies of what the online network trains
        target = {f"target.{k}": v for k, v in self.target.state_dict().items() if k in trained}
        rank_tensors, rank_state = rank_entries(ranks)
        tensors = {**opt_tensors, **target, **{f"rng.{k}": v for k, v in rng.items()}, **rank_tensors}
        if torch.cuda.is_available():
            tensors["rng.cuda"] = torch.cuda.get_rng_state()
        state = {"transitions": self.transitions, "updates": self.updates, "selection": self.selection.state_dict(),
                 "scheduler_step": self.scheduler.last_epoch, "optimizer": opt_rest,
                 "env": self.env.state_dict(), "config": self.config.to_dict(),
                 "recent": [list(r) for r in self.recent],
                 "task_weights": self.task_sampler.weights.tolist() if self.task_sampler is not None else None,
                 **rank_state}
        write_checkpoint(self.output_dir / "last", self.online.save_pretrained, tensors, state)

    def load_checkpoint(self, folder: Path) -> None:
        with resume_guard(folder):  # a damaged last/ is a ResumeError naming it, not a KeyError or size mismatch
            self._restore(folder)

    def _restore(self, folder: Path) -> None:
        tensors, state = read_checkpoint(folder)
        # Settings added since the run was saved read as their defaults (what the run had without them).
        saved_model = {**TrainConfig().to_dict()["model"], **state["config"]["model"]}
        current = self.config.to_dict()["model"]
        if saved_model != current:
            diff = {k: (saved_model.get(k), v) for k, v in current.items() if saved_model.get(k) != v}
            raise ResumeError(f"cannot resume {str(folder)!r}: model settings differ (saved, now): {diff}.")
        # Which layers train decides the optimizer's parameters: a run resumes with the layers it trained.
        saved_layers = state["config"].get("trainer", {}).get("train_layers", TrainConfig().trainer.train_layers)
        if saved_layers != self.config.trainer.train_layers:
            raise ResumeError(f"cannot resume {str(folder)!r}: it trained with trainer.train_layers {saved_layers}, "
                              f"this run asks for {self.config.trainer.train_layers}; resume with train_layers "
                              f"{saved_layers} (the checkpoint is kept as it is), or choose another trainer.output_dir.")
        online_tensors = read_weights(folder / MODEL_DIR / WEIGHTS_FILE)  # NaN/inf weights refused
        self.online.load_state_dict(online_tensors, strict=False)
        self.target.load_state_dict({k[len("target."):]: v for k, v in tensors.items() if k.startswith("target.")},
                                    strict=False)
        self.optimizer.load_state_dict(optimizer_from_tensors(tensors, state["optimizer"]))
        self.scheduler.last_epoch = state["scheduler_step"]
        self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]  # type: ignore[attr-defined]
        own = own_entries(tensors, state, self.accelerator.process_index, str(folder))
        if own is not None:  # else: a process the saved run did not have keeps its fresh streams and episodes
            rng, env_state = own
            torch.set_rng_state(rng["torch"])
            self.sample_gen.set_state(rng["sample"])
            self.act_gen.set_state(rng["act"])
            self.env.load_state_dict(env_state)
        if "rng.cuda" in tensors and torch.cuda.is_available():
            torch.cuda.set_rng_state(tensors["rng.cuda"])
        self.transitions, self.updates = int(state["transitions"]), int(state["updates"])
        # a run saved before the selection rule kept only its best score: it is the highest and the kept one
        old = {"kept": state.get("best_metric"), "top": state.get("best_metric")}
        self.selection.load_state_dict(state.get("selection") or old)
        if self.task_sampler is not None and state.get("task_weights"):
            self.task_sampler.weights = torch.tensor(state["task_weights"], dtype=torch.float64)
        self.recent.clear()
        self.recent.extend((float(r), float(f), bool(c)) for r, f, c in state["recent"])
