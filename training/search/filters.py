"""Metadata filters: which chunks a search may take, as conditions on their metadata or a predicate.

A `Filter` is a tree: conditions `key op value` (`==`, `!=`, `in`, `nin`, `>`, `>=`, `<`, `<=`) joined by `and` or
`or`, or a Python predicate over the metadata dict. The in-process index turns it into a row mask once per index
version (`ChunkIndex.mask`); an external store is handed the tree to translate into its own filter language, so
filtered search scales with the store (a predicate cannot be translated and is refused there).

Rules every path follows: a chunk whose metadata lacks the key matches no condition on it (`!=` and `nin`
included), so a filter on a key no chunk has matches nothing; a list value of `==` in the dict form means any of
its items; comparing values that cannot be ordered (`>` of a string against a number) raises `FilterError` naming
the key and the values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args

Op = Literal["==", "!=", "in", "nin", ">", ">=", "<", "<="]
OPS: tuple[str, ...] = get_args(Op)
Join = Literal["and", "or"]
Scalar = str | int | float | bool


FilterSpec = Union["Filter", Mapping[str, Any], Callable[[Mapping[str, Any]], bool], None]
"""What a caller may pass as a filter: a `Filter`, a dict `{key: value}`, a predicate, or None."""


class FilterError(ValueError):
    """A malformed filter, or metadata a condition cannot compare; the message names the key and the value."""


@dataclass(frozen=True)
class Condition:
    """`metadata[key] op value`; `value` is a list for `in` / `nin`."""

    key: str
    op: Op
    value: Any

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise FilterError(f"a filter key must be a non-empty string, got {self.key!r}.")
        if self.op not in OPS:
            raise FilterError(f"unsupported filter operator {self.op!r} on key {self.key!r}; supported: {list(OPS)}.")
        if self.op in ("in", "nin"):
            if not isinstance(self.value, (list, tuple)) or not all(_scalar(v) for v in self.value):
                raise FilterError(f"filter {self.key!r} {self.op}: the value must be a list of strings, numbers or "
                                  f"booleans, got {self.value!r:.80}.")
            object.__setattr__(self, "value", tuple(self.value))
        elif not _scalar(self.value):
            raise FilterError(f"filter {self.key!r} {self.op}: the value must be a string, number or boolean, got "
                              f"{self.value!r:.80}.")

    @property
    def plain_value(self) -> Any:
        """The value as JSON and the stores' filter languages hold it (a list for `in` / `nin`)."""
        return list(self.value) if isinstance(self.value, tuple) else self.value

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        if self.key not in metadata:
            return False
        have = metadata[self.key]
        if self.op == "==":
            return bool(have == self.value)
        if self.op == "!=":
            return bool(have != self.value)
        if self.op == "in":
            return have in self.value
        if self.op == "nin":
            return have not in self.value
        try:
            return {">": have > self.value, ">=": have >= self.value, "<": have < self.value,
                    "<=": have <= self.value}[self.op]
        except TypeError:
            raise FilterError(f"filter {self.key!r} {self.op} {self.value!r}: a chunk's {self.key!r} is {have!r}, which "
                              "cannot be ordered against it; compare numbers with numbers and strings with "
                              "strings.") from None


@dataclass(frozen=True)
class Filter:
    """Conditions (or nested filters) joined by `join`, or a `predicate` over the metadata dict."""

    parts: tuple[Condition | Filter, ...] = ()
    join: Join = "and"
    predicate: Callable[[Mapping[str, Any]], bool] | None = None

    def __post_init__(self) -> None:
        if self.join not in get_args(Join):
            raise FilterError(f"a filter joins its conditions with 'and' or 'or', got {self.join!r}.")
        if self.predicate is not None and self.parts:
            raise FilterError("a filter is either a predicate or conditions, not both.")
        for part in self.parts:
            if not isinstance(part, (Condition, Filter)):
                raise FilterError(f"a filter's parts are conditions or filters, got {part!r:.80}.")

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """Whether a chunk with this metadata may be taken."""
        if self.predicate is not None:
            verdict = self.predicate(metadata)
            if not isinstance(verdict, bool):
                raise FilterError(f"a filter function must return True or False, got {verdict!r:.80}.")
            return verdict
        if self.join == "and":
            return all(p.matches(metadata) for p in self.parts)
        return any(p.matches(metadata) for p in self.parts)

    @property
    def key(self) -> str | None:
        """A canonical text of the conditions (what masks are cached by); None for a predicate."""
        if self.predicate is not None or any(isinstance(p, Filter) and p.key is None for p in self.parts):
            return None
        return json.dumps(self._tree(), sort_keys=True, default=repr)

    def _tree(self) -> Any:
        return {self.join: [p._tree() if isinstance(p, Filter) else [p.key, p.op, p.plain_value]
                            for p in self.parts]}

    # ------------------------------------------------------------------ the forms users write
    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Filter:
        """LangChain's form: `{key: value}` pairs that must all match; a list value means any of its items."""
        if not isinstance(spec, Mapping):
            raise FilterError(f"a filter is a dict {{key: value}} or a function of the metadata, got {spec!r:.80}.")
        parts = [Condition(k, "in" if isinstance(v, (list, tuple)) else "==", v) for k, v in spec.items()]
        return cls(tuple(parts), "and")

    @classmethod
    def coerce(cls, spec: FilterSpec) -> Filter | None:
        """A `Filter` from any accepted form (a `Filter`, a dict, a predicate), None for no filter."""
        if spec is None or isinstance(spec, Filter):
            return spec
        if isinstance(spec, Mapping):
            return cls.from_dict(spec)
        if callable(spec):
            return cls(predicate=spec)
        raise FilterError(f"a filter is a dict {{key: value}} or a function of the metadata, got {type(spec).__name__}: "
                          f"{spec!r:.80}.")


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))
