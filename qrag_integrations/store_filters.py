"""qrag's metadata filters in the filter languages of the vector databases behind LangChain's stores.

Each store has its translator (`filter_translator`, chosen by `isinstance`, so a subclass of a store gets its
store's): Chroma a `where` clause, Qdrant a `models.Filter` over the `metadata.` payload keys LangChain writes,
LangChain's FAISS and `InMemoryVectorStore` (which filter in the process) qrag's own test of the metadata (FAISS's
`filter=` takes a function of the metadata, the in-memory store's one of the `Document`), and any other store the plain
`{key: value}` dict most LangChain stores take (only for conditions that form one: `==` and `in`, joined by `and`).
Each keeps the rules of `qrag.training.search.filters` (a chunk without the key matches no condition on it; values
typed as JSON types them; a list value read by its items; a key is one key), and what a store cannot hold is refused
with `FilterError` before the store is asked:

- Chroma (1.x) compares typed values as qrag does, but its `$ne` / `$nin` match records that lack the key. So `!=` a
  number is sent as `< v or > v`, `!=` a boolean as `== not v`; `!=` / `nin` a string, and an empty `nin`, would need
  a test that a key is present, which Chroma lacks, and are refused. Chroma orders numbers only, and cuts a float
  operand toward zero against integer metadata: a fraction is decided on integers by integer bounds
  (`exact_number`). Its `$eq` / `$in` never look inside a list value, so `==` / `in` add `$contains`; its orders and
  negations cannot look inside one at all, so over a store holding lists under the key they are refused
  (`check_store_can_mean`).
- Qdrant's exact match tells 1 from 1.0 and takes no float: a number is matched as the range `v ≤ x ≤ v`; `!=` / `nin`
  as "holds a value of the kind, and none of the values" (a string: "has the key, and holds no number nor boolean").
  Qdrant orders numbers only, reads every condition on a list payload by its items, and reads a dotted key as a path:
  such a key is quoted (`qdrant_key`). It cannot tell a dict from a string, so over a store holding dicts under the
  key a negation on strings is refused (`check_store_can_mean`).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Any, Literal

from qrag.training.search import Condition, Filter, FilterError, Kind, value_kind

CHROMA_OPS = {"==": "$eq", "!=": "$ne", "in": "$in", "nin": "$nin", ">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte"}
RANGE_BOUNDS = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


StoreKind = Literal["chroma", "qdrant", "faiss", "in-memory", "other"]
LANGCHAIN_STORES: tuple[tuple[StoreKind, str, str], ...] = (
    ("chroma", "langchain_chroma.vectorstores", "Chroma"),
    ("qdrant", "langchain_qdrant.qdrant", "QdrantVectorStore"),
    ("faiss", "langchain_community.vectorstores.faiss", "FAISS"),
    ("in-memory", "langchain_core.vectorstores.in_memory", "InMemoryVectorStore"),
)
"""The LangChain stores qrag knows: (kind, the module defining the class, the class)."""
IN_PROCESS: tuple[StoreKind, ...] = ("faiss", "in-memory")
"""The stores that filter in this process, by a function qrag gives them: they take qrag's own rules, functions too."""


def langchain_store_kind(store: Any) -> StoreKind:
    """Which known LangChain store `store` is, a subclass included ('other' for any other store).

    Told by `isinstance`, never by a class name: a store's class was imported before the store was made, so only
    the modules already loaded are looked in, and none is imported (an uninstalled store's package is no error)."""
    for kind, module, name in LANGCHAIN_STORES:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and isinstance(store, cls):
            return kind
    return "other"


def filter_translator(store: Any) -> Callable[[Filter], Any]:
    """The translator of `store`'s filter language: a filter that lets some chunks through and not all
    (`Filter.reduce`) to what its search's `filter=` takes. Chroma: `chroma_where`; Qdrant: `qdrant_filter`;
    LangChain's FAISS, which filters in the process: qrag's own test; any other store: `plain_filter`."""
    kind = langchain_store_kind(store)
    if kind == "faiss":
        return lambda where: where.matches  # qrag's own rules, functions too
    if kind == "in-memory":  # its filter is a function of a Document
        return lambda where: lambda doc: where.matches(doc.metadata or {})
    if kind == "chroma":
        return chroma_where
    if kind == "qdrant":
        return qdrant_filter
    name = type(store).__name__
    return lambda where: plain_filter(where, name)


def store_filter(store: Any, where: Filter) -> Any:
    """`where` as `store`'s search takes it (its `filter=` argument, by `filter_translator`); None when it lets every
    chunk through.

    Raises:
        FilterError: a predicate (a function cannot be sent to a database; FAISS, in the process, takes one),
            conditions this store's filter language cannot hold (named, with the store and what to use instead),
            or a filter that lets no chunk through (`in []`: search nothing rather than ask the store).
    """
    name = type(store).__name__
    translate = filter_translator(store)
    if langchain_store_kind(store) in IN_PROCESS:
        return translate(where)
    if where.predicate is not None or where.key is None:
        raise FilterError(f"{name} filters in the database, which cannot run a Python function: pass the filter as "
                          "a dict {key: value} (or build the retriever with from_texts, which applies functions).")
    reduced = where.reduce()
    if reduced is True:
        return None
    if reduced is False:
        raise FilterError(f"this filter lets no chunk through ({where.key}): a search with it finds nothing, without "
                          f"asking {name}.")
    return translate(reduced)


def plain_filter(where: Filter, store: str = "this store") -> dict[str, Any]:
    """The plain `{key: value}` dict most LangChain stores take, for a reduced filter of `==` / `in` joined by `and`.

    Raises:
        FilterError: any other condition or join (named, with the stores that hold it).
    """
    if where.join == "and" and all(isinstance(p, Condition) and p.op in ("==", "in") for p in where.parts):
        return {p.key: p.plain_value for p in where.parts if isinstance(p, Condition)}
    raise FilterError(f"qrag sends filters to {store} as a dict {{key: value}}, which holds '==' and 'in' joined by "
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
        scalar = _chroma_number(c.key, "==", c.value) if value_kind(c.value) == "number" else {c.key: {"$eq": c.value}}
        return _chroma_join("or", [scalar, *_chroma_contains(c.key, [c.value])])
    if c.op == "in":  # Chroma takes lists of one Python type (int and float apart); a number matches 1 and 1.0 alike
        groups: dict[type, list[Any]] = {}
        for v in c.value:
            groups.setdefault(type(v), []).append(v)
        fractions = [v for v in groups.pop(float, []) if not v.is_integer()]
        whole = [v for v in c.value if isinstance(v, float) and v.is_integer()]
        if whole:
            groups[float] = whole
        parts: list[dict[str, Any] | None] = [{c.key: {"$in": vs}} for vs in groups.values()]
        parts += [_chroma_number(c.key, "==", v) for v in fractions]
        return _chroma_join("or", [*parts, *_chroma_contains(c.key, c.value)])
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
    """`key op value` for a number, exact on integer and float metadata alike (`exact_number`)."""
    return _chroma_join("or", [_chroma_join("and", [{key: {CHROMA_OPS[o]: v}} for o, v in group])
                               for group in exact_number(op, value)])


def exact_number(op: str, value: float) -> list[list[tuple[str, float]]]:
    """`x op value` (`==`, `>`, `>=`, `<`, `<=`) as an `or` of `and`s of comparisons no store gets wrong.

    Chroma (1.5) compares integer metadata with a float operand cut toward zero (`== 2010.5` matches 2010, `< 2010.5`
    misses it, `<= -1.5` takes -1), and float metadata exactly. So for a fraction v between the integers lo < v < hi,
    integers are decided by integer operands, exact on every value, and the fraction only inside (lo, hi), where no
    integer lies: `x <= v` is `x <= lo or (lo < x < hi and x <= v)`, `x > v` is `x >= hi or (lo < x < hi and x > v)`,
    `x == v` is `lo < x < hi and x == v`. Exact arithmetic gives the same."""
    if not isinstance(value, float) or value.is_integer():
        return [[(op, value)]]
    low, high = math.floor(value), math.ceil(value)
    between = [(">", low), ("<", high), (op, value)]
    if op == "==":
        return [between]
    if op in ("<", "<="):
        return [[("<=", low)], between]
    return [[(">=", high)], between]


def _chroma_contains(key: str, values: Sequence[Any]) -> list[dict[str, Any]]:
    """Clauses matching a list value (Chroma 1.5 holds lists of one type) that holds one of `values`: `$contains` is
    typed (3 is not 3.0 there), so a whole number goes as an int and as a float. None where this Chroma has no lists."""
    if not _chroma_holds_lists():
        return []
    items: list[Any] = []
    for v in values:
        items += [int(v), float(v)] if value_kind(v) == "number" and float(v).is_integer() else [v]
    return [{key: {"$contains": v}} for v in items]


@cache
def _chroma_holds_lists() -> bool:
    """Whether the installed Chroma stores list values (it then filters them with `$contains`; older ones do not)."""
    try:
        from chromadb.api.types import validate_where  # lazy: an optional dependency

        validate_where({"k": {"$contains": "v"}})  # type: ignore[dict-item]
    except Exception:  # no Chroma, or one that refuses the operator: no list values to match
        return False
    return True


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
    key = qdrant_key(c.key)
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
    # holds a value of the values' kinds, and none of the values (a list: none of its items, as in-process)
    kinds = [_qdrant_has_kind(models, key, kind) for kind in _by_kind(values)]
    return models.Filter(should=kinds, must_not=[_qdrant_equal(models, key, values)])


def qdrant_key(key: str) -> str:
    """LangChain's payload path of metadata `key`, read as one key: a key with a dot (or any character a Qdrant path
    gives a meaning) is quoted, `metadata."a.b"`, so it never reaches into a nested object as Qdrant's paths do.

    Raises:
        FilterError: a key holding a double quote, which a Qdrant path cannot quote.
    """
    if all(ch.isalnum() or ch in "_-" for ch in key):
        return f"metadata.{key}"
    if '"' in key:
        raise FilterError(f"Qdrant reads a filter key as a path and cannot quote one holding '\"': rename the "
                          f"metadata key {key!r}, or use qrag's in-process index (QRAGRetriever.from_texts).")
    return f'metadata."{key}"'


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


def _qdrant_has_kind(models: Any, key: str, kind: Kind) -> Any:
    """Chunks holding a `kind` value under `key` (a list: an item of that kind). A string is told as a value that is
    neither a number nor a boolean (Qdrant has no test of a string)."""
    if kind == "number":
        return models.Filter(should=[models.FieldCondition(key=key, range=models.Range(lt=0)),
                                     models.FieldCondition(key=key, range=models.Range(gte=0))])
    booleans = [models.FieldCondition(key=key, match=models.MatchValue(value=b)) for b in (True, False)]
    if kind == "bool":
        return models.Filter(should=booleans)
    has_key = models.Filter(must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key=key))])
    return models.Filter(must=[has_key], must_not=[_qdrant_has_kind(models, key, "number"), *booleans])


# ---------------------------------------------------------------------- what a store's values would break
def value_shapes(metadatas: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Which keys hold a list or a dict value in some of `metadatas`: {key: {'list', 'dict'}} (only such keys)."""
    shapes: dict[str, set[str]] = {}
    for meta in metadatas:
        for key, value in meta.items():
            if isinstance(value, (list, tuple)):
                shapes.setdefault(key, set()).add("list")
            elif isinstance(value, dict):
                shapes.setdefault(key, set()).add("dict")
    return shapes


class ValueShapes:
    """Which metadata keys of a store's documents hold lists or dicts (`value_shapes`), as a store adapter keeps
    them: from its BM25 index's current version when it has one, else read from the store once (metadata only) and
    followed through qrag's adds (a key stays marked after its last list is deleted: a refusal, never a wrong
    answer). Thread-safe."""

    def __init__(self) -> None:
        self._shapes: dict[str, set[str]] = {}
        self._of: object = None  # the BM25 version they were read from, or `self` once read from the store
        self._lock = threading.Lock()

    def current(self, version: Any | None, read: Callable[[], Iterable[Sequence[Mapping[str, Any]]]],
                ) -> dict[str, set[str]]:
        """The shapes: of `version` (a `LexicalVersion`, its `metadatas`) when given, else of the pages of metadata
        `read()` yields (read once)."""
        with self._lock:
            if version is not None:
                if self._of is not version:
                    self._shapes, self._of = value_shapes(version.metadatas), version
            elif self._of is None:
                self._shapes = {}
                for page in read():
                    self.took(page, locked=True)
                self._of = self
            return self._shapes

    def took(self, metadatas: Sequence[Mapping[str, Any]], *, locked: bool = False) -> None:
        """Follow an add of documents with these metadata."""
        with contextlib.nullcontext() if locked else self._lock:
            for key, shapes in value_shapes(metadatas).items():
                self._shapes.setdefault(key, set()).update(shapes)


def check_store_can_mean(kind: StoreKind | Literal["llama-index-chroma"], where: Filter,
                         shapes: Mapping[str, set[str]], store: str) -> None:
    """Refuse a reduced filter whose meaning `store` would change on the values it holds (`shapes`, from
    `value_shapes` of its documents' metadata), instead of answering otherwise than in process: Chroma's orders and
    negations cannot look inside a list value (they would leave such a document out, where qrag reads a list by
    its items), LlamaIndex's Chroma filters no condition at all there, and Qdrant, which cannot tell a dict from a
    string, would let a dict value through a negation on strings (qrag matches a dict by no condition).

    Raises:
        FilterError: named: the store, the key, the condition and what to use instead.
    """
    for c in _conditions(where):
        held = shapes.get(c.key, set())
        if kind == "llama-index-chroma" and "list" in held:
            raise FilterError(
                f"{store} holds list values under {c.key!r}, and LlamaIndex's Chroma filters cannot look inside a "
                f"list (they have no $contains): filter {c.key!r} {c.op} {c.plain_value!r:.60} would leave those "
                "nodes out, where qrag reads a list by its items. Filter that key through LangChain's Chroma "
                "(QRAGRetriever.from_vector_store), or use qrag's in-process index.")
        if kind == "chroma" and "list" in held and (c.op in RANGE_BOUNDS or c.op in ("!=", "nin")):
            raise FilterError(
                f"{store} holds list values under {c.key!r}, and Chroma's {CHROMA_OPS[c.op]} cannot look inside a "
                f"list: filter {c.key!r} {c.op} {c.plain_value!r:.60} would leave those documents out, where qrag "
                "reads a list by its items. Use '==' / 'in' on that key (Chroma looks inside lists for those), or "
                "qrag's in-process index (QRAGRetriever.from_texts).")
        strings = c.op == "!=" and isinstance(c.value, str) or c.op == "nin" and (
            not c.value or any(isinstance(v, str) for v in c.value))
        if kind == "qdrant" and "dict" in held and strings:
            raise FilterError(
                f"{store} holds dict values under {c.key!r}, which Qdrant cannot tell from strings: filter {c.key!r} "
                f"{c.op} {c.plain_value!r:.60} would let them through, where qrag matches a dict by no condition. "
                "Keep dicts out of that key, filter it with '==' / 'in', or use qrag's in-process index "
                "(QRAGRetriever.from_texts).")


def _conditions(where: Filter | Condition) -> list[Condition]:
    if isinstance(where, Condition):
        return [where]
    return [c for p in where.parts for c in _conditions(p)]


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

