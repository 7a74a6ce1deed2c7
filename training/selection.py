"""What the trainer selects on and samples by: per-task fact EM at exactly |SF| hops, and task weights.

The measure the main job reports is fact EM with exactly |SF| greedy hops (all supporting facts among
the first |SF| picks); the best checkpoint is chosen on its mean over tasks, so a mixed return that
counts extra hops as partly right cannot pick a model that is imprecise on the hard tasks. The same
per-task scores weight task sampling toward what is not yet learned (`trainer.task_weighting='error'`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

import torch

from qrag.training.chunk_vectors import ChunkVectorCache
from qrag.training.config import EnvConfig
from qrag.training.data.episode import Episode

SINGLE_TASK = "all"  # the task name of episodes without a metadata 'task'


def task_of(episode: Episode) -> str:
    """The episode's task (`metadata['task']`), or 'all' when it names none (a user's own data)."""
    task = (episode.metadata or {}).get("task")
    return str(task) if task else SINGLE_TASK


def evaluate_at_sf(
    evaluate: Callable[..., dict[str, float]], qnet: Any, episodes: Sequence[Episode], env_config: EnvConfig,
    **kwargs: Any,
) -> dict[str, float]:
    """Per-task fact EM with exactly |SF| greedy hops, and their mean over tasks.

    Args:
        evaluate: `qrag.training.policy.evaluate` (a greedy pass returning `fact_em`).
        qnet / episodes / env_config / kwargs: passed to `evaluate`; each group of equal (task, |SF|) runs
            with `max_hops = |SF|`.

    Returns:
        `{'sf_em/<task>': ..., 'sf_em': mean over tasks}`.
    """
    groups: dict[tuple[str, int], list[Episode]] = defaultdict(list)
    for ep in episodes:
        groups[(task_of(ep), len(ep.supporting))].append(ep)
    hits: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for (task, n_sf), group in sorted(groups.items()):
        env = replace(env_config, max_hops=n_sf, never_terminate=False)
        em = evaluate(qnet, group, env, **kwargs)["fact_em"]
        hits[task] += em * len(group)
        counts[task] += len(group)
    out = {f"sf_em/{t}": hits[t] / counts[t] for t in sorted(counts)}
    out["sf_em"] = sum(out.values()) / max(1, len(counts))
    return out


class TaskSampler:
    """Draws training episodes: a task first (uniformly, or weighted by its validation error), then an
    episode of that task uniformly. With one task this is plain uniform sampling.

    Args:
        episodes: The training pool.
        generator: The torch generator of episode sampling (resumable).
        floor: Every task keeps at least this weight, so a solved task is still revisited.
    """

    def __init__(self, episodes: Sequence[Episode], generator: torch.Generator, floor: float = 0.05) -> None:
        by_task: dict[str, list[int]] = defaultdict(list)
        for i, ep in enumerate(episodes):
            by_task[task_of(ep)].append(i)
        self.tasks = sorted(by_task)
        self.indices = [by_task[t] for t in self.tasks]
        self.generator, self.floor = generator, floor
        self.weights = torch.tensor([len(ix) for ix in self.indices], dtype=torch.float64)  # as uniform over episodes

    def set_errors(self, errors: dict[str, float]) -> None:
        """Weight each task by `max(error, floor)`; tasks missing from `errors` keep weight 1."""
        self.weights = torch.tensor([max(self.floor, errors.get(t, 1.0)) for t in self.tasks], dtype=torch.float64)

    def probabilities(self) -> dict[str, float]:
        p = self.weights / self.weights.sum()
        return {t: float(x) for t, x in zip(self.tasks, p, strict=True)}

    def __call__(self) -> int:
        t = int(torch.multinomial(self.weights, 1, generator=self.generator)) if len(self.tasks) > 1 else 0
        pool = self.indices[t]
        return pool[int(torch.randint(len(pool), (1,), generator=self.generator))]


def calibrate_stop_rule(model: Any, episodes: Sequence[Episode], store: ChunkVectorCache | None = None) -> dict[str, Any]:
    """Calibrate `model`'s stop rule on validation `episodes` and set it in `model.hops` (saved with the model).

    The threshold is `qrag.training.calibrate.calibrate_stop_threshold`'s (best mean fact F1 whose fact EM
    stays within 0.01 of taking every hop); `hops.calibrated` becomes True. Returns the report as `stop/*`.
    """
    from qrag.training.calibrate import calibrate_stop_threshold

    result = calibrate_stop_threshold(model, [ep for ep in episodes if ep.supporting], store=store)
    model.hops = replace(model.hops, stop_threshold=float(result.threshold), calibrated=True)
    return {f"stop/{k}": v for k, v in asdict(result).items()}
