"""qrag's metadata filters in the filter languages of the vector databases behind LangChain's stores.

Chroma gets a `where` clause, Qdrant a `models.Filter` over the `metadata.` payload keys LangChain writes, and any
other store the plain `{key: value}` dict most LangChain stores take (only for conditions that form one: `==` and
`in`, joined by `and`). Each keeps qrag's rule that a chunk without the key matches no condition on it.
"""

from __future__ import annotations

from typing import Any

from qrag.training.search import Condition, Filter, FilterError

CHROMA_OPS = {"==": "$eq", "!=": "$ne", "in": "$in", "nin": "$nin", ">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte"}


def store_filter(store: Any, where: Filter) -> Any:
    """`where` as `store`'s search takes it (its `filter=` argument).

    Raises:
        FilterError: a predicate (a function cannot be sent to a database), or conditions this store's filter
            language cannot hold (named, with the store).
    """
    kind = type(store).__name__
    if where.predicate is not None or where.key is None:
        raise FilterError(f"{kind} filters in the database, which cannot run a Python function: pass the filter as "
                          "a dict {key: value} (or build the retriever with from_texts, which applies functions).")
    if kind == "Chroma":
        return chroma_where(where)
    if kind == "QdrantVectorStore":
        return qdrant_filter(where)
    if where.join == "and" and all(isinstance(p, Condition) and p.op in ("==", "in") for p in where.parts):
        return {p.key: p.plain_value for p in where.parts if isinstance(p, Condition)}
    raise FilterError(f"qrag sends filters to {kind} as a dict {{key: value}}, which holds '==' and 'in' joined by "
                      "'and' only; use those, or a Chroma or Qdrant store.")


def chroma_where(where: Filter) -> dict[str, Any]:
    """A Chroma `where` clause: `{key: {"$op": value}}`, joined by `$and` / `$or`."""
    parts = [chroma_where(p) if isinstance(p, Filter) else {p.key: {CHROMA_OPS[p.op]: p.plain_value}}
             for p in where.parts]
    return parts[0] if len(parts) == 1 else {f"${where.join}": parts}


def qdrant_filter(where: Filter) -> Any:
    """A Qdrant `models.Filter` over LangChain's `metadata.<key>` payload fields."""
    from qdrant_client import models  # lazy: an optional dependency

    parts = [qdrant_filter(p) if isinstance(p, Filter) else _qdrant_condition(models, p) for p in where.parts]
    return models.Filter(must=parts) if where.join == "and" else models.Filter(should=parts)


def _qdrant_condition(models: Any, c: Condition) -> Any:
    key = f"metadata.{c.key}"
    has_key = models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=key))])
    if c.op in ("==", "!="):
        match = models.FieldCondition(key=key, match=models.MatchValue(value=c.value))
    elif c.op in ("in", "nin"):
        match = models.FieldCondition(key=key, match=models.MatchAny(any=c.plain_value))
    else:
        if isinstance(c.value, (str, bool)):
            raise FilterError(f"Qdrant orders numbers only: filter {c.key!r} {c.op} {c.value!r} needs a number.")
        bound = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}[c.op]
        match = models.FieldCondition(key=key, range=models.Range(**{bound: c.value}))
    if c.op in ("!=", "nin"):
        return models.Filter(must=[has_key, models.Filter(must_not=[match])])
    return match
