"""What the training loop keeps beside it: the progress bar, the milestones and the time budget.

`Trainer.train` reads as the loop over these: log / evaluation / checkpoint milestones every N transitions, and a
time budget that ends the run with its last evaluation and checkpoint inside it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

from tqdm.auto import tqdm

from qrag.training.learn.config import TrainerConfig


class Milestones:
    """Every-N-transitions events (logging, evaluation, checkpoints), each due once its next multiple is reached."""

    def __init__(self, transitions: int, **every: int) -> None:
        self.every = every
        self.next = {name: self._after(transitions, n) for name, n in every.items()}

    @staticmethod
    def _after(transitions: int, every: int) -> float:
        return (transitions // every + 1) * every if every > 0 else math.inf

    def due(self, name: str, transitions: int) -> bool:
        """Whether `name` is due at `transitions`; when it is, its next multiple becomes the next milestone."""
        if transitions < self.next[name]:
            return False
        self.next[name] = self._after(transitions, self.every[name])
        return True


class TimeBudget:
    """`trainer.max_minutes`, counted from the trainer's creation: the run must end within it, its last evaluation
    and checkpoint included, so it stops once the time left is less than its last step, evaluation and checkpoint
    took (measured, not guessed). Without a budget nothing is ever out of time."""

    def __init__(self, clock: Callable[[], float], created: float, max_minutes: float | None) -> None:
        self.clock, self.created = clock, created
        self.deadline = created + 60 * max_minutes if max_minutes else math.inf
        self.took = {"step": 0.0, "eval": 0.0, "save": 0.0}

    @property
    def limited(self) -> bool:
        return self.deadline < math.inf

    @contextlib.contextmanager
    def timing(self, part: str) -> Iterator[None]:
        """Measure one step, evaluation or checkpoint (the last one of each kind is what the next stop reads)."""
        tick = self.clock()
        yield
        self.took[part] = self.clock() - tick

    def short(self) -> bool:
        """Whether one more step, evaluation and checkpoint would run past the deadline."""
        return self.clock() + sum(self.took.values()) >= self.deadline


class RunBar:
    """The progress bar: it follows the limit that binds, the time budget when there is one, else the transitions."""

    def __init__(self, tc: TrainerConfig, transitions: int, shown: bool) -> None:
        self.budget_s = round(60 * tc.max_minutes) if tc.max_minutes else 0
        self.total = tc.total_transitions
        self.bar = tqdm(total=self.budget_s or self.total, initial=0 if self.budget_s else min(transitions, self.total),
                        disable=not shown, unit="s" if self.budget_s else "tr", dynamic_ncols=True,
                        bar_format="{percentage:3.0f}%|{bar}| {elapsed}<{remaining} of the time budget{postfix}"
                        if self.budget_s else None)
        self.postfix: dict[str, str] = {}

    def advance(self, before: int, transitions: int, elapsed_s: float, loss: float) -> None:
        """After an update: move by the seconds elapsed (a budget) or the transitions collected."""
        if self.budget_s:
            self.bar.update(min(round(elapsed_s), self.budget_s) - self.bar.n)
        else:
            self.bar.update(min(transitions, self.total) - min(before, self.total))
        self.show(refresh=False, tr=str(transitions), loss=f"{loss:.4f}")

    def show(self, refresh: bool = True, **fields: Any) -> None:
        self.postfix.update(fields)
        self.bar.set_postfix(self.postfix, refresh=refresh)

    def close(self) -> None:
        self.bar.close()
