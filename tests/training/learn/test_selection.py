"""Model selection at exactly |SF| hops per task, which evaluation best/ keeps, and task sampling weighted by
validation error."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

from qrag.training.data.episode import Episode
from qrag.training.learn.checkpoint_selection import (
    Selection,
    TaskSampler,
    evaluate_at_sf,
    standard_error,
    task_of,
)
from qrag.training.learn.config import EnvConfig


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


def test_standard_error_of_sf_em_by_hand() -> None:
    # two tasks: qa2 0.9 over 50 episodes, qa3 0.8 over 25: sqrt(0.9·0.1/50 + 0.8·0.2/25) / 2
    episodes = [ep("qa2", 2, i) for i in range(50)] + [ep("qa3", 3, i) for i in range(25)]
    result = {"sf_em/qa2": 0.9, "sf_em/qa3": 0.8, "sf_em": 0.85, "return": 0.75}
    assert standard_error(result, "sf_em", episodes) == pytest.approx((0.0018 + 0.0064) ** 0.5 / 2)
    # 'return' lies in [0, 1]: the bound sqrt(m(1 − m)/n) over all 75 episodes
    assert standard_error(result, "return", episodes) == pytest.approx((0.75 * 0.25 / 75) ** 0.5)
    assert standard_error({"sf_em/qa2": 1.0, "sf_em": 1.0}, "sf_em", episodes[:50]) == 0.0  # solved: no noise
    assert standard_error(result, "sf_em", []) == 0.0


def test_selection_keeps_the_latest_network_within_the_tolerance_of_the_top() -> None:
    # the main job's validation curve (experiments/results/main_job_margin/metrics.jsonl), one standard error about 0.0165
    sel = Selection()
    assert sel.offer(0.432, tolerance=0.02, trained=False)  # the starting network is kept first
    kept = [sel.offer(m, tolerance=0.0165, trained=True)
            for m in (0.748, 0.828, 0.820, 0.864, 0.864, 0.904, 0.888, 0.916, 0.924, 0.888, 0.892, 0.916, 0.916)]
    assert kept == [True] * 9 + [False, False, True, True]  # 0.888 and 0.892 are below 0.924 − 0.0165
    assert sel.state_dict() == {"kept": 0.916, "top": 0.924, "start": 0.432}
    # tolerance 0 keeps the highest only, ties going to the later network
    strict = Selection()
    assert [strict.offer(m, tolerance=0.0, trained=True) for m in (0.5, 0.7, 0.69, 0.7)] == [True, True, False, True]


def test_selection_never_keeps_a_trained_network_that_does_not_beat_the_start() -> None:
    sel = Selection()
    assert sel.offer(0.60, tolerance=0.0, trained=False)
    # within any tolerance of the trained top, but not above the network training started from
    assert [sel.offer(m, tolerance=0.5, trained=True) for m in (0.55, 0.60, 0.58)] == [False, False, False]
    assert sel.kept == 0.60 and sel.top == 0.60
    assert sel.offer(0.61, tolerance=0.5, trained=True) and sel.kept == 0.61
    assert not sel.offer(0.59, tolerance=0.5, trained=True)  # above the top's tolerance, not above the start


def test_selection_state_round_trips_and_reads_a_save_without_a_start() -> None:
    sel = Selection()
    sel.offer(0.4, tolerance=0.0, trained=False)
    sel.offer(0.7, tolerance=0.0, trained=True)
    again = Selection()
    again.load_state_dict(sel.state_dict())
    assert again == sel
    old = Selection()
    old.load_state_dict({"kept": 0.7, "top": 0.7})  # a run saved before the rule
    assert old.start is None and not old.offer(0.6, tolerance=0.05, trained=True)
    assert old.offer(0.66, tolerance=0.05, trained=True)
