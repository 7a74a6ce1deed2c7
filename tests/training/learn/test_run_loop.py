"""The loop's schedule and time budget, by hand."""

from __future__ import annotations

import math

from qrag.training.learn.run_loop import Milestones, TimeBudget


def test_milestones_fall_due_once_per_multiple_and_never_when_off() -> None:
    due = Milestones(8, log=8, eval=0, save=20).due  # a run resumed at 8 transitions
    assert [due("log", t) for t in (8, 12, 16, 24, 31, 32)] == [False, False, True, True, False, True]
    assert not any(due("eval", t) for t in (0, 8, 10**9))  # every 0: never
    assert [due("save", t) for t in (19, 20, 21, 45, 59, 60)] == [False, True, False, True, False, True]


def test_the_budget_stops_when_one_more_step_evaluation_and_checkpoint_would_overrun() -> None:
    now = [100.0]
    budget = TimeBudget(lambda: now[0], created=100.0, max_minutes=1.0)  # deadline 160 s
    assert budget.limited and budget.deadline == 160.0
    with budget.timing("step"):
        now[0] += 10.0
    with budget.timing("eval"):
        now[0] += 5.0
    with budget.timing("save"):
        now[0] += 2.0
    assert budget.took == {"step": 10.0, "eval": 5.0, "save": 2.0}
    now[0] = 142.9  # 142.9 + 17 = 159.9 < 160
    assert not budget.short()
    now[0] = 143.0  # 143 + 17 = 160: the last evaluation and checkpoint would end at the deadline
    assert budget.short()
    with budget.timing("eval"):  # the latest measure of each part is what counts
        now[0] += 1.0
    now[0] = 145.9
    assert not budget.short()  # 145.9 + 10 + 1 + 2 = 158.9


def test_without_a_budget_nothing_is_out_of_time() -> None:
    budget = TimeBudget(lambda: 1e12, created=0.0, max_minutes=None)
    assert not budget.limited and budget.deadline == math.inf and not budget.short()
