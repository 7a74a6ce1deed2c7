"""What the trainer needs to run as several processes: data shards, one stop decision, gathered resume states.

Under `accelerate launch` or `torchrun`: each process's share of the data, one stop decision for all, and each
process's own resume state gathered into rank 0's checkpoint.

Gradients are averaged by accelerate (DistributedDataParallel); the online network starts from rank 0's
weights (DDP broadcasts them) and the target towers are copied from it, so every process holds the same
networks throughout. Everything else a process owns is its own: its shard of the training episodes, its
environments and its random streams. Those travel through the checkpoint per rank, so a resumed run
continues every process where it stopped.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import gather_object

RNG_NAMES = ("torch", "sample", "act")


def shard(num_episodes: int, rank: int, world: int) -> list[int]:
    """The training-episode indices process `rank` of `world` samples from: every `world`-th, from `rank`.

    Raises:
        ValueError: fewer episodes than processes.
    """
    if num_episodes < world:
        raise ValueError(f"{num_episodes} training episode(s) cannot be shared among {world} processes; "
                         "give at least one episode per process (data.num_train) or launch fewer processes.")
    return list(range(rank, num_episodes, world))


def any_process(accelerator: Accelerator, flag: bool) -> bool:
    """True on every process when `flag` is True on any: keeps a per-process decision (a clock) in step."""
    if accelerator.num_processes == 1:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=accelerator.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def max_over_processes(accelerator: Accelerator, value: float) -> float:
    """The largest of every process's `value` (on every process): one number all ranks agree on."""
    if accelerator.num_processes == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=accelerator.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def gather_rank_states(accelerator: Accelerator, env_state: dict[str, Any],
                       rng: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Every process's environments and random streams, in rank order (on every process)."""
    local = {"env": env_state, "rng": {k: v.tolist() for k, v in rng.items()}}
    if accelerator.num_processes == 1:
        return [local]
    return list(gather_object([local]))


def rank_entries(states: list[dict[str, Any]]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Checkpoint tensors and JSON for ranks 1.. (rank 0 keeps the single-process names `rng.*`, `env`)."""
    tensors = {f"rank{r}.rng.{k}": torch.tensor(v, dtype=torch.uint8)
               for r, s in enumerate(states) if r for k, v in s["rng"].items()}
    return tensors, {"world_size": len(states), "rank_env": {str(r): s["env"] for r, s in enumerate(states) if r}}


def own_entries(tensors: dict[str, torch.Tensor], state: dict[str, Any], rank: int,
                folder: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """This rank's saved random streams and environments, or None when the run saved fewer processes."""
    if rank == 0:
        return {k: tensors[f"rng.{k}"] for k in RNG_NAMES}, state["env"]
    prefix = f"rank{rank}.rng."
    if f"{prefix}torch" not in tensors:
        warnings.warn(f"{folder!r} was saved by {state.get('world_size', 1)} process(es); process {rank} has no "
                      "saved environments and starts fresh episodes.", stacklevel=2)
        return None
    return {k: tensors[prefix + k] for k in RNG_NAMES}, state["rank_env"][str(rank)]
