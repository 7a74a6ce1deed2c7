"""LlamaIndex's `MetadataFilters` as qrag's metadata filters, and back (for a vector store's own query).

Supported: the operators `==`, `!=`, `in`, `nin`, `>`, `>=`, `<`, `<=` and the conditions `and` / `or`, nested;
any other operator or condition is refused by name before a search runs. Both ways keep the rules of
`qrag.training.search.filters` (a node without the key matches no condition on it; values typed as JSON types them).
Each store gets its translation (`metadata_filters_for`, by `isinstance`): LlamaIndex's Chroma store Chroma's rules,
any other store LlamaIndex's own `MetadataFilters` as its integration reads them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Literal

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from qrag.integrations.store_filters import exact_number, reduced_for
from qrag.training.search import Condition, Filter, FilterError, value_kind

OPERATORS = {FilterOperator.EQ: "==", FilterOperator.NE: "!=", FilterOperator.IN: "in", FilterOperator.NIN: "nin",
             FilterOperator.GT: ">", FilterOperator.GTE: ">=", FilterOperator.LT: "<", FilterOperator.LTE: "<="}
_BACK = {v: k for k, v in OPERATORS.items()}
CONDITIONS = {FilterCondition.AND: "and", FilterCondition.OR: "or"}


def from_metadata_filters(filters: MetadataFilters | None) -> Filter | None:
    """qrag's `Filter` for LlamaIndex `filters` (None for None).

    Raises:
        FilterError: not a `MetadataFilters`, or an operator or condition qrag does not apply (named).
    """
    if filters is None:
        return None
    if not isinstance(filters, MetadataFilters):
        raise FilterError(f"filters must be a llama_index MetadataFilters, got {type(filters).__name__}: "
                          f"{filters!r:.80}.")
    join = CONDITIONS.get(filters.condition)  # type: ignore[arg-type]
    if join is None:
        raise FilterError(f"filter condition {_name(filters.condition)!r} is not supported; use "
                          f"{[c.value for c in CONDITIONS]}.")
    parts: list[Condition | Filter] = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            inner = from_metadata_filters(f)
            assert inner is not None
            parts.append(inner)
            continue
        op = OPERATORS.get(f.operator)
        if op is None:
            raise FilterError(f"filter operator {_name(f.operator)!r} on key {f.key!r} is not supported; use "
                              f"{[o.value for o in OPERATORS]}.")
        parts.append(Condition(f.key, op, f.value))  # type: ignore[arg-type]
    return Filter(tuple(parts), join)  # type: ignore[arg-type]


Rules = Literal["chroma", "plain"]
CHROMA_STORE = ("llama_index.vector_stores.chroma.base", "ChromaVectorStore")
"""The module defining LlamaIndex's Chroma store, and its class."""


def is_chroma_store(store: Any) -> bool:
    """Whether `store` is LlamaIndex's Chroma store, a subclass included (`isinstance`; its module is looked up among
    those loaded, as a store's class is imported before the store exists: nothing is imported)."""
    cls = getattr(sys.modules.get(CHROMA_STORE[0]), CHROMA_STORE[1], None)
    return isinstance(cls, type) and isinstance(store, cls)


def metadata_filters_for(store: Any) -> Callable[[Filter], MetadataFilters]:
    """The translator of `store`'s filters (`to_metadata_filters` with its rules): Chroma's for LlamaIndex's Chroma
    store, LlamaIndex's plain `MetadataFilters` for any other."""
    name = type(store).__name__
    rules: Rules = "chroma" if is_chroma_store(store) else "plain"
    return lambda where: to_metadata_filters(where, name, rules=rules)


def to_metadata_filters(where: Filter, store: str = "a vector store", *, rules: Rules = "plain") -> MetadataFilters:
    """`where` as LlamaIndex `MetadataFilters` (what a LlamaIndex vector store's query takes), for a filter that lets
    some chunks through and not all (`Filter.reduce`), keeping qrag's rules on the stores' semantics.

    LlamaIndex's stores (Chroma's, the in-memory one) count a node without the key as a match of `NE` / `NIN`, which
    qrag's filters never do: `!=` a number goes as `< v or > v`; `!=` / `nin` a string (and an empty `nin`) would
    need a test that a key is present and are refused. Lists go one Python type per `IN` (Chroma and `MetadataFilter`
    want that); `MetadataFilter` holds no booleans, so a condition on one is refused. With Chroma's `rules`, a store
    orders numbers only and a fraction goes with its integer bounds (`store_filters.exact_number`).

    Args:
        where: The filter.
        store: The store's name, for errors.
        rules: "chroma" for a Chroma store (`metadata_filters_for` chooses), "plain" for any other.

    Raises:
        FilterError: a predicate (a function cannot be sent to a database), a filter that lets every chunk or none
            through, or a condition the store cannot hold as qrag means it (named, with what to use instead).
    """
    out = _translate(reduced_for(where, store, "use MetadataFilters"), store, rules == "chroma")
    assert isinstance(out, MetadataFilters)  # a reduced filter has no part that matches nothing
    return out


def _translate(where: Filter | Condition, store: str, chroma: bool) -> MetadataFilters | MetadataFilter | None:
    """A filter or condition as LlamaIndex filters; None for one that matches nothing (a part of a mixed `nin`)."""
    if isinstance(where, Filter):
        return _join(where.join, [_translate(p, store, chroma) for p in where.parts], wrap=True)
    c = where
    if any(isinstance(v, bool) for v in (c.value if isinstance(c.value, tuple) else (c.value,))):
        raise FilterError(f"LlamaIndex's MetadataFilter holds strings and numbers, no booleans: filter {c.key!r} {c.op} "
                          f"{c.plain_value!r:.60} cannot go to {store}; store the flag as a string or a number, or "
                          "use qrag's in-process index (QRAGLlamaIndexRetriever.from_defaults), which applies it.")
    if c.op == "==":
        return _number(c.key, "==", c.value, chroma) if value_kind(c.value) == "number" else MetadataFilter(
            key=c.key, operator=FilterOperator.EQ, value=c.value)
    if c.op == "in":
        groups: dict[type, list[Any]] = {}
        for v in c.value:
            if not (isinstance(v, float) and not v.is_integer()):
                groups.setdefault(type(v), []).append(v)
        parts: list[MetadataFilters | MetadataFilter | None] = [
            MetadataFilter(key=c.key, operator=FilterOperator.IN, value=vs) for vs in groups.values()]
        parts += [_number(c.key, "==", v, chroma) for v in c.value if isinstance(v, float) and not v.is_integer()]
        return _join("or", parts)
    if c.op in (">", ">=", "<", "<="):
        if isinstance(c.value, str) and chroma:
            raise FilterError(f"Chroma orders numbers only: filter {c.key!r} {c.op} {c.value!r} needs a number (or "
                              "qrag's in-process index, QRAGLlamaIndexRetriever.from_defaults, which orders strings).")
        return _number(c.key, c.op, c.value, chroma) if value_kind(c.value) == "number" else MetadataFilter(
            key=c.key, operator=_BACK[c.op], value=c.value)
    values = [c.value] if c.op == "!=" else list(c.value)
    if not values:
        raise _unsure_of_presence(store, c, "an empty 'nin'")
    groups_by_kind: dict[str, list[Any]] = {}
    for v in values:
        groups_by_kind.setdefault(value_kind(v) or "", []).append(v)
    return _join("or", [_none_of(c, kind, vs, store, chroma) for kind, vs in groups_by_kind.items()])


def _none_of(c: Condition, kind: str, values: list[Any], store: str,
             chroma: bool) -> MetadataFilters | MetadataFilter | None:
    """Nodes holding a `kind` value (a number or a string) that is none of `values` (the stores' `NE` would take
    nodes without the key)."""
    if kind == "number":
        return _join("and", [_join("or", [_number(c.key, "<", v, chroma), _number(c.key, ">", v, chroma)])
                             for v in values])
    raise _unsure_of_presence(store, c, "a string")


def _number(key: str, op: str, value: float, chroma: bool) -> MetadataFilters | MetadataFilter | None:
    """`key op value` for a number; on a Chroma store exact on its integer metadata too (`store_filters.exact_number`)."""
    if not chroma:
        return MetadataFilter(key=key, operator=_BACK[op], value=value)
    return _join("or", [_join("and", [MetadataFilter(key=key, operator=_BACK[o], value=v) for o, v in group])
                        for group in exact_number(op, value)])


def _join(join: str, parts: list[MetadataFilters | MetadataFilter | None],
          wrap: bool = False) -> MetadataFilters | MetadataFilter | None:
    """`AND` / `OR` of the parts, None parts matching nothing; one part stands alone unless `wrap`."""
    kept = [p for p in parts if p is not None]
    if (join == "and" and len(kept) < len(parts)) or not kept:
        return None
    if len(kept) == 1 and not (wrap and isinstance(kept[0], MetadataFilter)):
        return kept[0]
    return MetadataFilters(filters=kept, condition=FilterCondition(join))  # type: ignore[arg-type]


def _unsure_of_presence(store: str, c: Condition, what: str) -> FilterError:
    return FilterError(
        f"{store} counts a node that lacks {c.key!r} as a match of '{c.op}', which qrag's filters never do, and "
        f"LlamaIndex's filters cannot test whether a node has a key, so filter {c.key!r} {c.op} "
        f"{c.plain_value!r:.60} on {what} cannot go to it: name the values you want with '==' / 'in', or use a "
        "number or boolean field, or qrag's in-process index (QRAGLlamaIndexRetriever.from_defaults), which "
        "applies it.")


def _name(value: Any) -> str:
    return str(getattr(value, "value", value))
