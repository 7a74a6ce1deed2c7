"""A clock for benchmark tests: each timed span lasts exactly the seconds the test gives it."""

from __future__ import annotations

from collections.abc import Sequence


class FakeClock:
    """Readings in pairs: the first opens a span (100 s after the last reading: time between spans, never
    counted), the second closes it `spans[i]` seconds later. Dyadic spans (1/64, 0.25, ...) keep the arithmetic
    exact."""

    def __init__(self, spans: Sequence[float]) -> None:
        self.spans = list(spans)
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.now += self.spans.pop(0) if self.reads % 2 else 100.0
        self.reads += 1
        return self.now

    @property
    def spent(self) -> bool:
        """Every span was timed, and none left open."""
        return not self.spans and self.reads % 2 == 0
