"""qrag's metadata filters in the filter languages of the vector databases behind LangChain's stores.

Chroma gets a `where` clause, Qdrant a `models.Filter` over the `metadata.` payload keys LangChain writes, LangChain's
FAISS (which filters in the process) qrag's own test of the metadata, and any other store the plain `{key: value}`
dict most LangChain stores take (only for conditions that form one: `==` and `in`, joined by `and`). Each keeps the
rules of `qrag.training.search.filters` (a chunk without the key matches no condition on it; values typed as JSON
types them), and what a store cannot hold is refused with `FilterError` before the store is asked:

- Chroma (1.x) compares typed values as qrag does, but its `$ne` / `$nin` match records that lack the key. So `!=` a
  number is sent as `< v or > v`, `!=` a boolean as `== not v`; `!=` / `nin` a string, and an empty `nin`, would need
  a test that a key is present, which Chroma lacks, and are refused. Chroma orders numbers only, and cuts a float
  operand to an integer against integer metadata: a fraction goes with its integer bounds (`exact_number`).
- Qdrant's exact match tells 1 from 1.0 and takes no float: a number is matched as the range `v ≤ x ≤ v`, `!=` a
  number as `< v or > v`, `!=` a string as "has the key, and it is neither the value nor a number nor a boolean".
  Qdrant orders numbers only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from qrag.training.search import Condition, Filter, FilterError, Kind, value_kind

CHROMA_OPS = {"==": "$eq", "!=": "$ne", "in": "$in", "nin": "$nin", ">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte"}
RANGE_BOUNDS = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


def store_filter(store: Any, where: Filter) -> Any:
    """`where` as `store`'s search takes it (its `filter=` argument); None when it lets every chunk through.

    Raises:
        FilterError: a predicate (a function cannot be sent to a database; FAISS, in the process, takes one),
            conditions this store's filter language cannot hold (named, with the store and what to use instead),
            or a filter that lets no chunk through (`in []`: search nothing rather than ask the store).
    """
    kind = type(store).__name__
    if kind == "FAISS":
        return where.matches  # LangChain's FAISS filters in the process: qrag's own rules, functions too
    if where.predicate is not None or where.key is None:
        raise FilterError(f"{kind} filters in the database, which cannot run a Python function: pass the filter as "
                          "a dict {key: value} (or build the retriever with from_texts, which applies functions).")
    reduced = where.reduce()
    if reduced is True:
        return None
    if reduced is False:
        raise FilterError(f"this filter lets no chunk through ({where.key}): a search with it finds nothing, without "
                          f"asking {kind}.")
    if kind == "Chroma":
        return chroma_where(reduced)
    if kind == "QdrantVectorStore":
        return qdrant_filter(reduced)
    if reduced.join == "and" and all(isinstance(p, Condition) and p.op in ("==", "in") for p in reduced.parts):
        return {p.key: p.plain_value for p in reduced.parts if isinstance(p, Condition)}
    raise FilterError(f"qrag sends filters to {kind} as a dict {{key: value}}, which holds '==' and 'in' joined by "
                      "'and' only; use those, or a Chroma or Qdrant store.")


# ---------------------------------------------------------------------- Chroma
def chroma_where(where: Filter) -> dict[str, Any]:
    """A Chroma `where` clause, `{key: {"$op": value}}` joined by `$and` / `$or`, for a filter that lets some chunks
    through and not all (`Filter.reduce`).

    Raises:
        FilterError: a condition Chroma cannot hold as qrag means it (named, with what to use instead).
    """
    clause = _chroma(reduced_for(where, "Chroma"))
    assert clause is not None  # a reduced filter has no part that matches nothing
    return clause


def _chroma(where: Filter | Condition) -> dict[str, Any] | None:
    """The clause of a filter or condition; None for one that matches nothing (a part of a mixed-kind `nin`)."""
    if isinstance(where, Filter):
        return _chroma_join(where.join, [_chroma(p) for p in where.parts])
    c = where
    if c.op == "==":
        return _chroma_number(c.key, "==", c.value) if value_kind(c.value) == "number" else {c.key: {"$eq": c.value}}
    if c.op == "in":  # Chroma takes lists of one Python type (int and float apart); a number matches 1 and 1.0 alike
        groups: dict[type, list[Any]] = {}
        for v in c.value:
            groups.setdefault(type(v), []).append(v)
        fractions = [v for v in groups.pop(float, []) if not v.is_integer()]
        whole = [v for v in c.value if isinstance(v, float) and v.is_integer()]
        if whole:
            groups[float] = whole
        return _chroma_join("or", [{c.key: {"$in": vs}} for vs in groups.values()]
                            + [_chroma_number(c.key, "==", v) for v in fractions])
    if c.op in RANGE_BOUNDS:
        if isinstance(c.value, str):
            raise FilterError(f"Chroma orders numbers only: filter {c.key!r} {c.op} {c.value!r} needs a number "
                              "(or qrag's in-process index, QRAGRetriever.from_texts, which orders strings).")
        return _chroma_number(c.key, c.op, c.value)
    values = [c.value] if c.op == "!=" else list(c.value)
    if not values:
        raise _unsure_of_presence("Chroma", c, "an empty 'nin'")
    return _chroma_join("or", [_chroma_none_of(c, kind, vs) for kind, vs in _by_kind(values).items()])


def _chroma_none_of(c: Condition, kind: Kind, values: list[Any]) -> dict[str, Any] | None:
    """Chunks holding a `kind` value that is none of `values` (Chroma's `$ne` would take chunks without the key)."""
    if kind == "number":
        return _chroma_join("and", [_chroma_join("or", [_chroma_number(c.key, "<", v), _chroma_number(c.key, ">", v)])
                                    for v in values])
    if kind == "bool":
        rest = [b for b in (False, True) if b not in values]
        return {c.key: {"$eq": rest[0]}} if rest else None
    raise _unsure_of_presence("Chroma", c, "a string")


def _chroma_number(key: str, op: str, value: float) -> dict[str, Any] | None:
    """`key op value` for a number, exact on integer metadata too (`exact_number`)."""
    join, parts = exact_number(op, value)
    return _chroma_join(join, [{key: {CHROMA_OPS[o]: v}} for o, v in parts])


def exact_number(op: str, value: float) -> tuple[str, list[tuple[str, float]]]:
    """`x op value` (`==`, `>`, `>=`, `<`, `<=`) as an `and` / `or` of comparisons no store gets wrong.

    Chroma (1.5) compares integer metadata with a float operand cut to an integer (`== 2010.5` matches 2010, `< 2010.5`
    misses it), so a fraction v is paired with its integer bounds: `x < v` as `x < v or x <= floor(v)`, `x > v` as
    `x > v or x >= ceil(v)`, `x == v` as `x == v and floor(v) < x < ceil(v)`; exact arithmetic gives the same."""
    if not isinstance(value, float) or value.is_integer():
        return "and", [(op, value)]
    low, high = math.floor(value), math.ceil(value)
    if op == "==":
        return "and", [("==", value), (">", low), ("<", high)]
    if op in ("<", "<="):
        return "or", [("<", value), ("<=", low)]
    return "or", [(">", value), (">=", high)]


def _chroma_join(join: str, parts: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """`$and` / `$or` of the clauses (Chroma wants two or more); None parts match nothing."""
    kept = [p for p in parts if p is not None]
    if join == "and" and len(kept) < len(parts):
        return None
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else {f"${join}": kept}


# ---------------------------------------------------------------------- Qdrant
def qdrant_filter(where: Filter) -> Any:
    """A Qdrant `models.Filter` over LangChain's `metadata.<key>` payload fields, for a filter that lets some chunks
    through and not all (`Filter.reduce`).

    Raises:
        FilterError: an order on a string (Qdrant orders numbers only).
    """
    from qdrant_client import models  # lazy: an optional dependency

    reduced = reduced_for(where, "Qdrant")
    return _qdrant(models, reduced)


def _qdrant(models: Any, where: Filter) -> Any:
    parts = [_qdrant(models, p) if isinstance(p, Filter) else _qdrant_condition(models, p) for p in where.parts]
    return models.Filter(must=parts) if where.join == "and" else models.Filter(should=parts)


def _qdrant_condition(models: Any, c: Condition) -> Any:
    key = f"metadata.{c.key}"
    if c.op == "==":
        return _qdrant_equal(models, key, [c.value])
    if c.op == "in":
        return _qdrant_equal(models, key, list(c.value))
    if c.op in RANGE_BOUNDS:
        if isinstance(c.value, str):
            raise FilterError(f"Qdrant orders numbers only: filter {c.key!r} {c.op} {c.value!r} needs a number "
                              "(or qrag's in-process index, QRAGRetriever.from_texts, which orders strings).")
        return models.FieldCondition(key=key, range=models.Range(**{RANGE_BOUNDS[c.op]: c.value}))
    values = [c.value] if c.op == "!=" else list(c.value)
    if not values:  # an empty `nin`: every chunk that has the key
        return models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=key))])
    parts = [_qdrant_none_of(models, key, kind, vs) for kind, vs in _by_kind(values).items()]
    kept = [p for p in parts if p is not None]
    return kept[0] if len(kept) == 1 else models.Filter(should=kept)


def _qdrant_equal(models: Any, key: str, values: list[Any]) -> Any:
    """Chunks holding one of `values`: strings by `MatchAny`, booleans by `MatchValue`, numbers by the range
    `v ≤ x ≤ v` (Qdrant's exact match tells 1 from 1.0 and takes no float)."""
    groups = _by_kind(values)
    parts = [models.FieldCondition(key=key, range=models.Range(gte=v, lte=v)) for v in groups.get("number", [])]
    parts += [models.FieldCondition(key=key, match=models.MatchValue(value=v)) for v in groups.get("bool", [])]
    if "string" in groups:
        strings = groups["string"]
        match = models.MatchValue(value=strings[0]) if len(strings) == 1 else models.MatchAny(any=strings)
        parts.append(models.FieldCondition(key=key, match=match))
    return parts[0] if len(parts) == 1 else models.Filter(should=parts)


def _qdrant_none_of(models: Any, key: str, kind: Kind, values: list[Any]) -> Any:
    """Chunks holding a `kind` value that is none of `values` (None: no chunk can)."""
    if kind == "number":
        ranges = [models.Filter(should=[models.FieldCondition(key=key, range=models.Range(lt=v)),
                                        models.FieldCondition(key=key, range=models.Range(gt=v))]) for v in values]
        return ranges[0] if len(ranges) == 1 else models.Filter(must=ranges)
    if kind == "bool":
        rest = [b for b in (False, True) if b not in values]
        return models.FieldCondition(key=key, match=models.MatchValue(value=rest[0])) if rest else None
    has_key = models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=key))])
    other_kinds = [models.FieldCondition(key=key, range=models.Range(lt=0)),
                   models.FieldCondition(key=key, range=models.Range(gte=0)),
                   models.FieldCondition(key=key, match=models.MatchValue(value=True)),
                   models.FieldCondition(key=key, match=models.MatchValue(value=False))]
    return models.Filter(must=[has_key], must_not=[_qdrant_equal(models, key, values), *other_kinds])


# ---------------------------------------------------------------------- shared
def reduced_for(where: Filter, store: str, instead: str = "pass the filter as a dict {key: value}") -> Filter:
    """`where.reduce()` for a store to be handed, refusing what a store is never sent: a predicate (`instead` says
    what to pass), and a filter that lets every chunk or none through (search without one, or nothing)."""
    if where.predicate is not None or where.key is None:
        raise FilterError(f"{store} filters in the database, which cannot run a Python function: {instead}.")
    reduced = where.reduce()
    if isinstance(reduced, bool):
        raise FilterError(f"this filter lets {'every' if reduced else 'no'} chunk through ({where.key}): search "
                          f"{'without a filter' if reduced else 'nothing'} rather than send it to {store}.")
    return reduced


def _by_kind(values: Sequence[Any]) -> dict[Kind, list[Any]]:
    """The values by JSON kind, each once, in their first order."""
    out: dict[Kind, list[Any]] = {}
    for v in values:
        kind = value_kind(v)
        assert kind is not None  # a Condition holds scalars only
        if not any(type(v) is type(w) and v == w for w in out.get(kind, [])):
            out.setdefault(kind, []).append(v)
    return out


def _unsure_of_presence(store: str, c: Condition, what: str) -> FilterError:
    return FilterError(
        f"{store} counts a chunk that lacks {c.key!r} as a match of '{c.op}' ({CHROMA_OPS[c.op]}), which qrag's "
        f"filters never do, and cannot test whether a chunk has a key, so filter {c.key!r} {c.op} "
        f"{c.plain_value!r:.60} on {what} cannot go to it: name the values you want with '==' / 'in', or use a "
        "number or boolean field, or qrag's in-process index (QRAGRetriever.from_texts), which applies it.")

