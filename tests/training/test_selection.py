"""Model selection at exactly |SF| hops per task, and task sampling weighted by validation error."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

from qrag.training.config import EnvConfig
from qrag.training.data.episode import Episode
from qrag.training.selection import TaskSampler, evaluate_at_sf, task_of


def ep(task: str | None, n_sf: int, i: int) -> Episode:
    meta = {"task": task} if task else {}
    return Episode("q?", [f"c{j}" for j in range(6)], tuple(range(n_sf)), "a", f"{task}-{i}", meta)


def test_each_task_and_sf_group_is_scored_at_exactly_sf_hops_and_tasks_weigh_equally() -> None:
    calls: list[tuple[str, int, int, bool]] = []

    def fake_evaluate(qnet: Any, episodes: list[Episode], env: EnvConfig, **kw: Any) -> dict[str, float]:
        calls.append((task_of(episodes[0]), len(episodes[0].supporting), env.max_hops, env.never_terminate))
        assert kw == {"num_envs": 3}
        # qa2 (|SF| 2) scores 0.5, qa3 (|SF| 3) 1.0, qa1 (|SF| 1) 0.0
        return {"fact_em": {1: 0.0, 2: 0.5, 3: 1.0}[len(episodes[0].supporting)]}

    episodes = [ep("qa2", 2, i) for i in range(4)] + [ep("qa3", 3, i) for i in range(2)] + [ep("qa1", 1, 0)]
    out = evaluate_at_sf(fake_evaluate, None, episodes, EnvConfig(max_hops=6, never_terminate=True), num_envs=3)
    assert sorted(calls) == [("qa1", 1, 1, False), ("qa2", 2, 2, False), ("qa3", 3, 3, False)]
    assert out == {"sf_em/qa1": 0.0, "sf_em/qa2": 0.5, "sf_em/qa3": 1.0, "sf_em": pytest.approx(0.5)}


def test_a_task_with_mixed_sf_sizes_is_averaged_over_its_episodes() -> None:
    def fake_evaluate(qnet: Any, episodes: list[Episode], env: EnvConfig, **kw: Any) -> dict[str, float]:
        return {"fact_em": 1.0 if env.max_hops == 1 else 0.0}

    out = evaluate_at_sf(fake_evaluate, None, [ep(None, 1, 0), ep(None, 2, 1), ep(None, 2, 2), ep(None, 1, 3)],
                         EnvConfig())
    assert out == {"sf_em/all": 0.5, "sf_em": 0.5}


def test_task_sampler_follows_the_errors_with_a_floor() -> None:
    episodes = [ep("qa1", 1, i) for i in range(30)] + [ep("qa2", 2, i) for i in range(10)]
    sampler = TaskSampler(episodes, torch.Generator().manual_seed(0))
    assert sampler.probabilities() == pytest.approx({"qa1": 0.75, "qa2": 0.25})  # uniform over episodes at first
    sampler.set_errors({"qa1": 0.0, "qa2": 0.45})  # qa1 solved: floor 0.05
    assert sampler.probabilities() == pytest.approx({"qa1": 0.1, "qa2": 0.9})
    drawn = Counter(task_of(episodes[sampler()]) for _ in range(5000))
    assert drawn["qa2"] / 5000 == pytest.approx(0.9, abs=0.02)
    assert len({sampler() for _ in range(2000)}) == 40  # every episode of a task is reachable


def test_single_task_sampler_is_uniform_over_episodes() -> None:
    episodes = [ep(None, 1, i) for i in range(4)]
    sampler = TaskSampler(episodes, torch.Generator().manual_seed(0))
    sampler.set_errors({"all": 0.0})
    counts = Counter(sampler() for _ in range(4000))
    assert sorted(counts) == [0, 1, 2, 3] and min(counts.values()) > 900
