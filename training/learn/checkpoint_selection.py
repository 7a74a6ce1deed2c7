"""What the trainer selects on and samples by: per-task fact EM at exactly |SF| hops, and task weights.

The measure the main job reports is fact EM with exactly |SF| greedy hops (all supporting facts among
the first |SF| picks); the kept checkpoint is chosen on its mean over tasks, so a mixed return that
counts extra hops as partly right cannot pick a model that is imprecise on the hard tasks. The same
per-task scores weight task sampling toward what is not yet learned (`trainer.task_weighting='error'`).

Which evaluation is kept (`Selection`): the latest whose score is within one standard error of the highest
trained score so far, and above the starting network's. A validation set of 50 episodes per task measures
each score to about ±0.017, so "the highest" is mostly the luckiest draw, while the learning rate decays
over the run and the later networks are the annealed ones (docs/LEARNER.md, "Which checkpoint to keep").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from qrag.training.data.episode import Episode
from qrag.training.learn.config import EnvConfig
from qrag.training.search.chunk_vectors import ChunkVectorCache

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
        evaluate: `qrag.training.learn.evaluation.evaluate` (a greedy pass returning `fact_em`).
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


def standard_error(result: dict[str, float], select_on: str, episodes: Sequence[Episode]) -> float:
    """One standard error of the selection metric `result[select_on]` measured on `episodes`.

    'sf_em' is a mean of per-task proportions p_t over n_t episodes: SE = sqrt(Σ_t p_t(1 − p_t)/n_t) / T.
    'return' and 'fact_recall' lie in [0, 1], so their variance is at most m(1 − m) for mean m: SE ≤ sqrt(m(1 − m)/n),
    which is what is returned (an upper bound).
    """
    counts: dict[str, int] = defaultdict(int)
    for ep in episodes:
        counts[task_of(ep)] += 1
    if not counts:
        return 0.0
    if select_on == "sf_em":
        var = sum(p * (1.0 - p) / counts[t] for t in counts if (p := result.get(f"sf_em/{t}")) is not None)
        return math.sqrt(max(0.0, var)) / len(counts)
    m = min(1.0, max(0.0, result[select_on]))
    return math.sqrt(m * (1.0 - m) / sum(counts.values()))


@dataclass
class Selection:
    """Which validated network `best/` keeps (the trainer saves it whenever `offer` says so).

    A trained network is kept when its score is within `tolerance` of the highest trained score so far (that
    one included) and, once the starting network was scored, strictly above the starting network's: training
    that never beats the network it started from (for an anchored model, the base encoder's own search) keeps
    that network. Ties and near-ties go to the later network.

    Attributes:
        kept: The score of the network in `best/` (−inf before any).
        top: The highest score of a trained network so far (−inf before any).
        start: The starting network's score, if it was scored.
    """

    kept: float = -math.inf
    top: float = -math.inf
    start: float | None = None

    def offer(self, metric: float, *, tolerance: float, trained: bool) -> bool:
        """Record one evaluation; True if its network replaces the one in `best/`."""
        if not trained:
            self.start = metric
            keep = metric > self.kept
        else:
            self.top = max(self.top, metric)
            keep = metric >= self.top - tolerance and (self.start is None or metric > self.start)
        if keep:
            self.kept = metric
        return keep

    def state_dict(self) -> dict[str, float | None]:
        return {"kept": self.kept, "top": self.top, "start": self.start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kept, self.top = float(state["kept"]), float(state["top"])
        self.start = None if state.get("start") is None else float(state["start"])


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
    """Calibrate `model`'s stop rule on validation `episodes` and set it in `model.hop_settings` (saved with the model).

    The threshold is `qrag.training.learn.stop_calibration.calibrate_stop_threshold`'s (best mean fact F1 whose fact EM
    stays within 0.01 of taking every hop); `hops.calibrated` becomes True. Returns the report as `stop/*`.
    """
    from qrag.training.learn.stop_calibration import calibrate_stop_threshold

    result = calibrate_stop_threshold(model, [ep for ep in episodes if ep.supporting], store=store)
    model.hop_settings = replace(model.hop_settings, stop_threshold=float(result.threshold), calibrated=True)
    return {f"stop/{k}": v for k, v in asdict(result).items()}
