"""Metadata filters: which chunks a search may take, as conditions on their metadata or a predicate.

A `Filter` is a tree: conditions `key op value` (`==`, `!=`, `in`, `nin`, `>`, `>=`, `<`, `<=`) joined by `and` or
`or`, or a Python predicate over the metadata dict. The in-process index turns it into a row mask once per index
version (`ChunkIndex.mask`); an external store is handed the tree to translate into its own filter language, so
filtered search scales with the store (a predicate cannot be translated and is refused there).

The forms users write (`Filter.coerce`): a `Filter`; a dict, either LangChain's plain form `{key: value}` (a list
value means any of its items) or the Mongo form Chroma, PGVector, Qdrant and Pinecone users write
(`{"year": {"$gte": 2000, "$lt": 2010}}`, `{"$and": [...]}`, `{"$or": [...]}`; operators `$eq $ne $gt $gte $lt
$lte $in $nin`), its keys joined by `and`; or a function of the metadata dict.

Rules every path follows, in-process and in every store (a store refuses, before it is asked, what its filter
language cannot hold):
- A chunk whose metadata lacks the key matches no condition on it (`!=` and `nin` included), so a filter on a key no
  chunk has matches nothing.
- Values are typed as JSON types them: a boolean, a number, a string. A condition looks only at chunk values of its
  own value's kind: `{"flag": True}` matches `True`, never `1`; `1` and `1.0` are one number; `!=` 2000 matches the
  chunks holding a number other than 2000 (not a string, not a boolean); `nin` those holding a value of its items'
  kinds that is none of them (an empty `nin`: every chunk holding a string, number or boolean under the key).
- `in []` matches nothing; a filter without conditions (`{}`) matches everything, as no filter does.
- `>`, `>=`, `<`, `<=` order numbers with numbers and strings with strings (a boolean value is refused); a chunk whose
  value cannot be ordered against the condition's (a string under a number's order) matches no order, as a store
  leaves it out: one chunk's odd value never fails another's search. A malformed filter is refused when it is built.
- A list value (`{"tags": ["a", "b"]}`) is read by its items, as Mongo and Qdrant read an array: `==`, `in` and the
  orders match when one of its items does; `!=` and `nin` when it holds a value of the condition's kind and none
  that the condition names. A dict (or an item that is not a string, number or boolean) is no value: it matches no
  condition.
- A key is the whole name of one metadata key: `"a.b"` is the key `"a.b"`, never a path into a nested dict.
- A function that raises on a chunk's metadata raises `FilterError` naming the function, chained to its error.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args

Op = Literal["==", "!=", "in", "nin", ">", ">=", "<", "<="]
OPS: tuple[str, ...] = get_args(Op)
ORDER_OPS: tuple[str, ...] = (">", ">=", "<", "<=")
COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {"==": operator.eq, "!=": operator.ne, ">": operator.gt,
                                                     ">=": operator.ge, "<": operator.lt, "<=": operator.le}
"""The operators that compare one value with the condition's (`in` / `nin` look a value up)."""
Join = Literal["and", "or"]
Scalar = str | int | float | bool
Kind = Literal["bool", "number", "string"]

MONGO_OPS: dict[str, Op] = {"$eq": "==", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<=",
                            "$in": "in", "$nin": "nin"}
"""The Mongo form's operators on a key (`{"year": {"$gte": 2020}}`) as qrag's."""
MONGO_JOINS: dict[str, Join] = {"$and": "and", "$or": "or"}
"""The Mongo form's joins of filters (`{"$or": [{...}, {...}]}`)."""


FilterSpec = Union["Filter", Mapping[str, Any], Callable[[Mapping[str, Any]], bool], None]
"""What a caller may pass as a filter: a `Filter`, a dict (plain or Mongo form), a predicate, or None."""


class FilterError(ValueError):
    """A malformed filter, a filter a store cannot hold, or a filter function that failed; the message names the key
    and the value."""


def value_kind(value: Any) -> Kind | None:
    """The JSON kind of a metadata value: 'bool', 'number' (int or float, never a bool), 'string'; None for others."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


@dataclass(frozen=True)
class Condition:
    """`metadata[key] op value`; `value` is a list for `in` / `nin`."""

    key: str
    op: Op
    value: Any
    _members: frozenset[tuple[Kind | None, Any]] = field(default=frozenset(), init=False, repr=False, compare=False)
    _kinds: frozenset[Kind | None] = field(default=frozenset(), init=False, repr=False, compare=False)
    _test: Callable[[Any, Any], Any] | None = field(default=None, init=False, repr=False, compare=False)

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
            # (kind, value) pairs: one set lookup per chunk; ("number", 1) == ("number", 1.0), ("bool", True) apart
            object.__setattr__(self, "_members", frozenset((value_kind(v), v) for v in self.value))
            object.__setattr__(self, "_kinds", frozenset(k for k, _ in self._members))
        elif not _scalar(self.value):
            raise FilterError(f"filter {self.key!r} {self.op}: the value must be a string, number or boolean, got "
                              f"{self.value!r:.80}.")
        elif self.op in ORDER_OPS and isinstance(self.value, bool):
            raise FilterError(f"filter {self.key!r} {self.op} {self.value!r}: '>', '>=', '<', '<=' order numbers or "
                              "strings, not booleans; use '==' or '!=' with a boolean.")
        if self.op in COMPARISONS:
            object.__setattr__(self, "_test", COMPARISONS[self.op])

    @property
    def plain_value(self) -> Any:
        """The value as JSON and the stores' filter languages hold it (a list for `in` / `nin`)."""
        return list(self.value) if isinstance(self.value, tuple) else self.value

    @property
    def matches_nothing(self) -> bool:
        """Whether no chunk can match: `in []`, or `nin` every boolean and nothing else."""
        return (self.op == "in" and not self.value) or (
            self.op == "nin" and bool(self.value) and all(isinstance(v, bool) for v in self.value)
            and {True, False} <= set(self.value))

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """Whether a chunk with this metadata holds a value the condition takes (the module's rules; a list value
        by its items)."""
        if self.key not in metadata:
            return False
        have = metadata[self.key]
        if self._test is not None and type(have) is type(self.value):  # the usual case: a value of the same type
            return bool(self._test(have, self.value))
        kind = value_kind(have)
        if kind is None and isinstance(have, (list, tuple)):
            return self._matches_items(have)
        if self.op == "in":
            return kind is not None and (kind, have) in self._members
        if self.op == "nin":
            if not self.value:
                return kind is not None  # every chunk holding a value under the key (None is no value)
            return kind in self._kinds and (kind, have) not in self._members
        # a value of another kind (True against 1, "2000" against 2000, a dict) is not compared: no match
        if kind != value_kind(self.value):
            return False
        assert self._test is not None
        return bool(self._test(have, self.value))

    def _matches_items(self, items: list[Any] | tuple[Any, ...]) -> bool:
        """A list value: `==`, `in` and the orders take it when one of its items matches; `!=` and `nin` when it holds
        a value of the condition's kinds and none of the values (an empty `nin`: any value)."""
        kinds = [value_kind(v) for v in items]
        if self.op not in ("!=", "nin"):
            if self.op == "in":
                return any(k is not None and (k, v) in self._members for k, v in zip(kinds, items, strict=True))
            want, test = value_kind(self.value), self._test
            assert test is not None
            return any(k == want and bool(test(v, self.value)) for k, v in zip(kinds, items, strict=True))
        if self.op == "nin" and not self.value:
            return any(k is not None for k in kinds)
        members = self._members if self.op == "nin" else frozenset({(value_kind(self.value), self.value)})
        wanted = {k for k, _ in members}
        return any(k in wanted for k in kinds) and not any(
            k is not None and (k, v) in members for k, v in zip(kinds, items, strict=True))

    def _tree(self) -> list[Any]:
        """[key, op, value], `in` / `nin` values deduplicated and sorted (one value: `==` / `!=`)."""
        if self.op not in ("in", "nin"):
            return [self.key, self.op, self.value]
        values = sorted({_canonical(v): v for v in self.value}.items())
        if len(values) == 1:
            return [self.key, "==" if self.op == "in" else "!=", values[0][1]]
        return [self.key, self.op, [v for _, v in values]]


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
        """Whether a chunk with this metadata may be taken.

        Raises:
            FilterError: a predicate that raised (chained to its error) or answered something other than True or
                False.
        """
        if self.predicate is not None:
            try:
                verdict = self.predicate(metadata)
            except FilterError:
                raise
            except Exception as e:
                raise FilterError(_predicate_failure(self.predicate, e, metadata)) from e
            if not isinstance(verdict, bool):
                raise FilterError(f"a filter function must return True or False, got {verdict!r:.80} from "
                                  f"{_function_name(self.predicate)}.")
            return verdict
        if self.join == "and":
            return all(p.matches(metadata) for p in self.parts)
        return any(p.matches(metadata) for p in self.parts)

    @property
    def key(self) -> str | None:
        """A canonical text of the conditions (what masks are cached by); None for a predicate. Filters that say the
        same in other words share it: parts in any order, nested joins of one kind, a one-part join, the Mongo and
        the plain form, `in` values in any order."""
        if self.predicate is not None or any(isinstance(p, Filter) and p.key is None for p in self.parts):
            return None
        return json.dumps(self._tree(), sort_keys=True, default=repr)

    def _tree(self) -> Any:
        parts: dict[str, Any] = {}
        for p in self.parts:
            tree = p._tree()
            for t in tree[self.join] if isinstance(tree, dict) and self.join in tree else [tree]:
                parts[_canonical(t)] = t
        if len(parts) == 1:
            return next(iter(parts.values()))
        return {self.join: [parts[k] for k in sorted(parts)]}

    def reduce(self) -> Filter | bool:
        """This filter without the parts that let every chunk through or none: True when it lets every chunk through
        (no condition: no filter), False when it lets none (`in []`), else a filter none of whose parts does
        either. A store is handed the reduced filter, and not asked at all for False. A predicate stays as it is."""
        if self.predicate is not None:
            return self
        neutral = self.join == "and"  # and: True changes nothing, False decides; or: the other way round
        parts: list[Condition | Filter] = []
        for p in self.parts:
            reduced: Condition | Filter | bool = p.reduce() if isinstance(p, Filter) else (
                False if p.matches_nothing else p)
            if reduced is neutral:
                continue
            if reduced is (not neutral):
                return not neutral
            assert not isinstance(reduced, bool)
            if isinstance(reduced, Filter) and (reduced.join == self.join or len(reduced.parts) == 1) and (
                    reduced.predicate is None):
                parts.extend(reduced.parts)  # (a and b) and c: a and b and c
            else:
                parts.append(reduced)
        if self.join == "and":
            merged = _common_values(parts)
            if merged is False:
                return False
            parts = merged
        if not parts:
            return neutral
        if len(parts) == 1 and isinstance(parts[0], Filter):
            return parts[0]
        return Filter(tuple(parts), self.join)

    # ------------------------------------------------------------------ the forms users write
    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Filter:
        """A filter from a dict, every key of which must match: `{key: value}` (a list value: any of its items),
        `{key: {"$op": value, ...}}` (several operators: all of them), `{"$and": [dict, ...]}`, `{"$or": [dict, ...]}`.

        Raises:
            FilterError: not a dict, an unknown `$` operator (named, with the supported ones), or a malformed value.
        """
        if not isinstance(spec, Mapping):
            raise FilterError(f"a filter is a dict {{key: value}} or a function of the metadata, got {spec!r:.80}.")
        parts: list[Condition | Filter] = []
        for key, value in spec.items():
            if isinstance(key, str) and key.startswith("$"):
                parts.append(cls._join_from_dict(key, value))
            elif isinstance(value, Mapping):
                if not value:
                    raise FilterError(f"filter {key!r}: an operator dict needs an operator, one of "
                                      f"{', '.join(MONGO_OPS)}; got {{}}.")
                for op, operand in value.items():
                    if op not in MONGO_OPS:
                        raise FilterError(f"unknown filter operator {op!r} on key {key!r}; supported: "
                                          f"{', '.join(MONGO_OPS)} (or a plain value, or a list: any of its items).")
                    parts.append(Condition(key, MONGO_OPS[op], operand))
            else:
                parts.append(Condition(key, "in" if isinstance(value, (list, tuple)) else "==", value))
        if len(parts) == 1 and isinstance(parts[0], Filter):
            return parts[0]
        return cls(tuple(parts), "and")

    @classmethod
    def _join_from_dict(cls, key: str, value: Any) -> Filter:
        join = MONGO_JOINS.get(key)
        if join is None:
            raise FilterError(f"unknown filter operator {key!r}; a filter's keys are metadata keys or "
                              f"{', '.join(MONGO_JOINS)} (a list of filters), and a key's operators are "
                              f"{', '.join(MONGO_OPS)}.")
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, Mapping) for v in value):
            raise FilterError(f"filter {key!r} takes a list of filters (dicts), got {value!r:.80}.")
        return cls(tuple(cls.from_dict(v) for v in value), join)

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


def _common_values(parts: list[Condition | Filter]) -> list[Condition | Filter] | Literal[False]:
    """The parts of an `and` with its `==` / `in` conditions on one key made one, of the values every one of them
    allows (False when none is common): a tenant floor `tenant == 'b'` and a call's `tenant == 'c'` allow nothing,
    whatever filter language holds them (a plain `{key: value}` dict would keep only the last)."""
    allowed: dict[str, dict[tuple[Any, ...], Any]] = {}
    order: list[Condition | Filter | str] = []
    for p in parts:
        if not (isinstance(p, Condition) and p.op in ("==", "in")):
            order.append(p)
            continue
        mine = {_value_id(v): v for v in (p.value if p.op == "in" else (p.value,))}
        if p.key in allowed:
            allowed[p.key] = {i: v for i, v in allowed[p.key].items() if i in mine}
        else:
            allowed[p.key] = mine
            order.append(p.key)
    out: list[Condition | Filter] = []
    for item in order:
        if not isinstance(item, str):
            out.append(item)
            continue
        values = list(allowed[item].values())
        if not values:
            return False
        out.append(Condition(item, "==", values[0]) if len(values) == 1 else Condition(item, "in", values))
    return out


def _value_id(value: Any) -> tuple[Any, ...]:
    """A value as a condition compares it: its kind, and a number as a float (1 and 1.0 are one number)."""
    kind = value_kind(value)
    return (kind, float(value)) if kind == "number" else (kind, value)


def _canonical(tree: Any) -> str:
    """A sort key and identity of a value or a filter's tree: its kind, then its JSON."""
    return f"{value_kind(tree) or 'tree'}:{json.dumps(tree, sort_keys=True, default=repr)}"


def _function_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))


def _predicate_failure(fn: Callable[..., Any], error: Exception, metadata: Mapping[str, Any]) -> str:
    """What to tell a user whose filter function raised on a chunk's metadata, with a hint for the usual causes."""
    if isinstance(error, KeyError):
        hint = f"a chunk may lack a key: read it with m.get({error.args[0]!r}), which gives None when it is missing"
    elif isinstance(error, TypeError) and "argument" in str(error):
        hint = "a filter function takes one argument, the chunk's metadata dict (lambda m: ...)"
    else:
        hint = ("a filter function must answer True or False for every chunk's metadata, also one that lacks a key "
                "(m.get(key)) or holds another type")
    return (f"the filter function {_function_name(fn)} raised {type(error).__name__}: {error} on a chunk whose "
            f"metadata is {dict(metadata)!r:.120}; {hint}.")
