"""The settings of one search (`SearchConfig`, METHOD.md §4), each the model's saved `HopSettings` unless set.

`HopSettings` travel with a checkpoint (`qrag.training.model.config`: the horizon the model was trained for, its
stop threshold); a `SearchConfig` is what one search uses, each field set by the caller or, where it says 'model',
taken from the model's `HopSettings` (`SearchConfig.resolved`). Searchers, adapters and `qrag-eval` read it here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from qrag.training.model.config import FILLS, Fill, HopSettings, lexical_weight_ok

__all__ = ["FILLS", "FROM_MODEL", "Fill", "FromModel", "HopSettings", "Order", "SearchConfig", "SearchError"]

Order = Literal["hop", "document"]
FromModel = Literal["model"]
FROM_MODEL: FromModel = "model"  # a search setting that takes the model's saved value (`QNetwork.hop_settings`)


class SearchError(ValueError):
    """A search argument or a model/store pairing is invalid; the message names the value and the fix."""


@dataclass
class SearchConfig:
    """Multi-hop search settings; every field can be overridden per call (see `qrag.training.search.searcher`)."""

    k: int | None = None
    """Exact number of results per question; None: adaptive (stop rule decides)."""
    max_hops: int | None = None
    """Most hops (state encodings that pick a chunk) per question; None: the model's trained horizon."""
    stop_threshold: float | FromModel | None = FROM_MODEL
    """Stop before a hop whose best Q-value is below this; 'model': the model's saved (calibrated) threshold;
    None disables the rule."""
    min_hops: int = 1
    """Hops always taken before the stop rule may stop (a retriever that returns nothing helps nobody)."""
    beam_size: int = 1
    """Hop sequences kept per question; 1 is greedy."""
    order: Order = "hop"
    """Order of the returned hits: 'hop' or 'document' (position in the corpus, for long documents)."""
    fill: Fill | FromModel = FROM_MODEL
    """What ranks an exact-`k` search's results past its hops (`HopSettings.fill`): 'state', 'question',
    'question_unguarded', or 'model': the model's saved choice."""
    lexical_weight: float | FromModel = FROM_MODEL
    """Weight of lexical evidence at every hop (`HopSettings.lexical_weight`; 0: Q alone), or 'model': the model's
    saved weight."""
    batch_size: int = 64
    """Questions searched together (their states share encoder batches)."""
    score_threshold: float | None = None
    """Results whose score (the Q-value plus any lexical evidence, `Hit.score`) is below this are dropped, after
    the hops and the top-up, so a search may return fewer than `k` results, or none; None keeps every one.
    Results come in hop order (or document order), not score order."""

    def validate(self) -> SearchConfig:
        for name in ("k", "max_hops", "min_hops", "beam_size", "batch_size"):
            value = getattr(self, name)
            if name in ("k", "max_hops") and value is None:
                continue
            low = 0 if name == "min_hops" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SearchError(f"{name} must be an integer >= {low}, got {value!r}.")
        t = self.stop_threshold
        if t is not None and t != FROM_MODEL and (isinstance(t, bool) or not isinstance(t, (int, float)) or math.isnan(t)):
            raise SearchError(f"stop_threshold must be a number, 'model' or None, got {t!r}.")
        if self.order not in ("hop", "document"):
            raise SearchError(f"order must be 'hop' or 'document', got {self.order!r}.")
        if self.fill != FROM_MODEL and self.fill not in FILLS:
            raise SearchError(f"fill must be one of {[*FILLS, FROM_MODEL]}, got {self.fill!r}.")
        if self.lexical_weight != FROM_MODEL and not lexical_weight_ok(self.lexical_weight):
            raise SearchError(f"lexical_weight must be a finite number >= 0 or 'model', got {self.lexical_weight!r}.")
        s = self.score_threshold
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s)):
            raise SearchError(f"score_threshold must be a finite number or None, got {s!r}.")
        return self

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def resolved(self, settings: HopSettings) -> SearchConfig:
        """A copy whose `max_hops`, `stop_threshold`, `fill` and `lexical_weight` left to the model take the model's
        saved values."""
        return dataclasses.replace(
            self,
            max_hops=settings.max_hops if self.max_hops is None else self.max_hops,
            stop_threshold=settings.stop_threshold if self.stop_threshold == FROM_MODEL else self.stop_threshold,
            fill=settings.fill if self.fill == FROM_MODEL else self.fill,
            lexical_weight=settings.lexical_weight if self.lexical_weight == FROM_MODEL else self.lexical_weight,
        )

    @property
    def horizon(self) -> int:
        """`max_hops` of a resolved config."""
        if self.max_hops is None:
            raise SearchError("max_hops is left to the model: resolve the config with SearchConfig.resolved first.")
        return self.max_hops

    @property
    def threshold(self) -> float | None:
        """`stop_threshold` of a resolved config (None: no stop rule)."""
        if self.stop_threshold == FROM_MODEL:
            raise SearchError("stop_threshold is left to the model: resolve the config with SearchConfig.resolved first.")
        return self.stop_threshold  # type: ignore[return-value]

    @property
    def guarded(self) -> bool:
        """Whether a resolved exact-`k` search applies the stop rule and fills from the question's ranking."""
        if self.fill == FROM_MODEL:
            raise SearchError("fill is left to the model: resolve the config with SearchConfig.resolved first.")
        return self.fill == "question"

    @property
    def by_question(self) -> bool:
        """Whether a resolved exact-`k` search fills past its hops from the question's own ranking."""
        return self.guarded or self.fill == "question_unguarded"

    @property
    def weight(self) -> float:
        """`lexical_weight` of a resolved config."""
        if self.lexical_weight == FROM_MODEL:
            raise SearchError("lexical_weight is left to the model: resolve the config with SearchConfig.resolved first.")
        return float(self.lexical_weight)

    def with_overrides(self, overrides: Mapping[str, Any]) -> SearchConfig:
        """A copy with per-call overrides; unknown names raise `SearchError` listing the known ones."""
        unknown = sorted(set(overrides) - set(self.field_names()))
        if unknown:
            raise SearchError(f"unknown search argument(s) {unknown}; allowed: {self.field_names()}.")
        return dataclasses.replace(self, **overrides).validate()
