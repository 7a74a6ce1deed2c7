"""LlamaIndex's `MetadataFilters` as qrag's metadata filters, and back (for a vector store's own query).

Supported: the operators `==`, `!=`, `in`, `nin`, `>`, `>=`, `<`, `<=` and the conditions `and` / `or`, nested;
any other operator or condition is refused by name before a search runs.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from qrag.training.search import Condition, Filter, FilterError

OPERATORS = {FilterOperator.EQ: "==", FilterOperator.NE: "!=", FilterOperator.IN: "in", FilterOperator.NIN: "nin",
             FilterOperator.GT: ">", FilterOperator.GTE: ">=", FilterOperator.LT: "<", FilterOperator.LTE: "<="}
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


def to_metadata_filters(where: Filter) -> MetadataFilters:
    """`where` as LlamaIndex `MetadataFilters` (what a LlamaIndex vector store's query takes).

    Raises:
        FilterError: a predicate (a function cannot be sent to a database).
    """
    if where.predicate is not None or where.key is None:
        raise FilterError("a vector store filters in the database, which cannot run a Python function: use "
                          "MetadataFilters.")
    back = {v: k for k, v in OPERATORS.items()}
    filters: list[Any] = [to_metadata_filters(p) if isinstance(p, Filter)
                          else MetadataFilter(key=p.key, operator=back[p.op], value=p.plain_value)
                          for p in where.parts]
    return MetadataFilters(filters=filters, condition=FilterCondition(where.join))


def _name(value: Any) -> str:
    return str(getattr(value, "value", value))
