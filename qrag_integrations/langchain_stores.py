"""Reading the LangChain vector stores qrag knows: Chroma, Qdrant, FAISS and `InMemoryVectorStore`.

Beside their filter translators (`store_filters`): each store's search by vector and how its scores read, its
documents (texts, ids, metadata and, when asked, vectors), which ids it holds, its size and its name in messages.

Every store is told by `langchain_store_kind` (`isinstance`, a subclass read as its store).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.vectorstores import VectorStore

from qrag.integrations.metric import CHROMA_CONVENTIONS, Convention, MetricError, ScoreMap, chroma_space
from qrag.integrations.store_filters import langchain_store_kind

VectorSearch = Callable[..., list[tuple[Any, float]]]
QDRANT_CONVENTIONS: dict[str, Convention] = {"DOT": "ip", "COSINE": "cosine", "EUCLID": "l2"}


def langchain_vector_search(store: VectorStore) -> tuple[VectorSearch, ScoreMap | None]:
    """A LangChain store's search by vector with its raw scores, and how they turn into ⟨query, x⟩ (None: the store
    does not say, and `LangChainChunkStore` probes it).

    Chroma reports distances by its space ('ip' 1 − ⟨q, x⟩, 'cosine' 1 − cos, 'l2' squared L2), Qdrant its
    `distance` (DOT, COSINE, EUCLID: plain L2), LangChain's `InMemoryVectorStore` cosine, FAISS its flat index
    (inner product, else squared L2; `normalize_L2` divides queries by their norm).

    Raises:
        MetricError: a metric no score map reads (Qdrant MANHATTAN).
        TypeError: the store cannot search by vector with scores.
    """
    kind = langchain_store_kind(store)  # a subclass too
    if kind == "chroma":
        space = chroma_space(store._collection)  # type: ignore[attr-defined]
        search = store.similarity_search_by_vector_with_relevance_scores  # type: ignore[attr-defined]
        return search, ScoreMap(CHROMA_CONVENTIONS[space]) if space in CHROMA_CONVENTIONS else None
    search = getattr(store, "similarity_search_with_score_by_vector", None)
    if not callable(search):
        raise TypeError(
            f"{type(store).__name__} has no similarity_search_with_score_by_vector(); qrag needs the raw scores of a vector search "
            "(e.g. Chroma, Qdrant, FAISS or LangChain's InMemoryVectorStore)."
        )
    if kind == "qdrant":
        distance = str(getattr(getattr(store, "distance", ""), "name", getattr(store, "distance", ""))).upper()
        name = next((c for d, c in QDRANT_CONVENTIONS.items() if distance.endswith(d)), None)
        if name is None:
            raise MetricError(f"the Qdrant collection uses {distance!r}, whose scores give no inner product; create it "
                              "with distance=Distance.DOT (or COSINE for unit vectors).")
        return search, ScoreMap(name)
    if kind == "in-memory":
        return search, ScoreMap("cosine")
    if kind == "faiss":
        strategy = str(getattr(getattr(store, "distance_strategy", ""), "name", "")).upper()
        return search, ScoreMap("ip" if strategy == "MAX_INNER_PRODUCT" else "l2_squared",
                                normalizes_query=bool(getattr(store, "_normalize_L2", False)))
    return search, None


READABLE = ("chroma", "in-memory", "faiss", "qdrant")
"""The stores whose documents qrag reads (for BM25, the check before the first query, and lookups by id)."""
READ_PAGE = 1000
"""Documents read from a store per call while indexing it for BM25 (Chroma, Qdrant): the peak holds one page."""


def read_documents(store: VectorStore, limit: int | None = None) -> tuple[list[Any], list[list[float]]] | None:
    """The documents a LangChain store holds (the first `limit`), as LangChain `Document`s named as its search names
    them, and their stored vectors (what the check before the first query compares); None for a store qrag cannot
    read (its search alone is used then). BM25 reads `document_pages`, which asks for no vector."""
    from langchain_core.documents import Document

    kind = langchain_store_kind(store)
    if kind == "chroma":
        got = store._collection.get(limit=limit, include=["documents", "metadatas", "embeddings"])  # type: ignore[attr-defined]
        docs = [Document(page_content=t or "", metadata=m or {}, id=i)
                for i, t, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True)]
        return docs, [list(map(float, v)) for v in got["embeddings"]]
    if kind == "in-memory":
        items = list(store.store.values())[:limit]  # type: ignore[attr-defined]
        return ([Document(page_content=d["text"], metadata=d.get("metadata") or {}, id=d["id"]) for d in items],
                [list(d["vector"]) for d in items])
    if kind == "faiss":
        rows = sorted(store.index_to_docstore_id.items())[:limit]  # type: ignore[attr-defined]
        found = [store.docstore.search(cid) for _, cid in rows]  # type: ignore[attr-defined]
        docs = [Document(page_content=d.page_content, metadata=d.metadata, id=cid)
                for d, (_, cid) in zip(found, rows, strict=True)]
        return docs, [store.index.reconstruct(int(r)).tolist() for r, _ in rows]  # type: ignore[attr-defined]
    if kind == "qdrant":
        points: list[Any] = []
        offset = None
        while limit is None or len(points) < limit:
            batch, offset = store.client.scroll(  # type: ignore[attr-defined]
                store.collection_name, limit=READ_PAGE if limit is None else limit,  # type: ignore[attr-defined]
                offset=offset, with_payload=True, with_vectors=True)
            points += batch
            if offset is None:
                break
        docs = [store._document_from_point(p, store.collection_name, store.content_payload_key,  # type: ignore[attr-defined]
                                           store.metadata_payload_key) for p in points[:limit]]  # type: ignore[attr-defined]
        vectors = [list((p.vector.get(store.vector_name) if isinstance(p.vector, dict) else p.vector) or [])  # type: ignore[attr-defined]
                   for p in points[:limit]]
        return docs, vectors
    return None


def documents_by_id(store: VectorStore, ids: Sequence[str]) -> list[tuple[Any, Sequence[float]]] | None:
    """Those of `ids` a LangChain store holds, as `Document`s named as its search names them, each with its stored
    vector as the store gives it (a NumPy row from Chroma and FAISS, a list from the others: what a hop scores
    exactly instead of asking the store for more); None for a store qrag cannot look up so.
    Chroma, Qdrant and `InMemoryVectorStore` are asked by id; FAISS reads its docstore and `reconstruct`s the rows."""
    from langchain_core.documents import Document

    kind = langchain_store_kind(store)
    if kind not in READABLE:
        return None
    if not ids:
        return []
    if kind == "chroma":
        got = store._collection.get(ids=list(ids), include=["documents", "metadatas", "embeddings"])  # type: ignore[attr-defined]
        return [(Document(page_content=t or "", metadata=m or {}, id=i), x)
                for i, t, m, x in zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True)]
    if kind == "in-memory":
        held = [d for i in ids if (d := store.store.get(i)) is not None]  # type: ignore[attr-defined]
        return [(Document(page_content=d["text"], metadata=d.get("metadata") or {}, id=d["id"]), list(d["vector"]))
                for d in held]
    if kind == "faiss":  # its row of each id read as LangChain's own delete reads it
        rows = {cid: row for row, cid in dict(store.index_to_docstore_id).items()}  # type: ignore[attr-defined]
        return [(Document(page_content=d.page_content, metadata=d.metadata, id=cid),
                 store.index.reconstruct(rows[cid]))  # type: ignore[attr-defined]
                for cid in ids if cid in rows and isinstance(d := store.docstore.search(cid), Document)]  # type: ignore[attr-defined]
    if kind == "qdrant":
        points = store.client.retrieve(store.collection_name, ids=[uuid_form(i) for i in ids],  # type: ignore[attr-defined]
                                       with_payload=True, with_vectors=True)
        return [(store._document_from_point(p, store.collection_name, store.content_payload_key,  # type: ignore[attr-defined]
                                            store.metadata_payload_key),  # type: ignore[attr-defined]
                 list((p.vector.get(store.vector_name) if isinstance(p.vector, dict) else p.vector) or []))  # type: ignore[attr-defined]
                for p in points]
    return None


def document_pages(store: VectorStore, page: int = READ_PAGE) -> Iterator[list[Any]] | None:
    """The documents a LangChain store holds, `page` at a time, as `Document`s named as its search names them, with
    their texts, ids and metadata and never their vectors (what BM25 and the filter checks read: a page is indexed
    and dropped before the next is read); None for a store qrag cannot read."""
    kind = langchain_store_kind(store)
    if kind not in READABLE:
        return None
    return _pages(store, kind, page)


def _pages(store: Any, kind: str, page: int) -> Iterator[list[Any]]:
    from langchain_core.documents import Document

    if kind == "chroma":
        offset = 0
        while True:
            got = store._collection.get(limit=page, offset=offset, include=["documents", "metadatas"])
            yield [Document(page_content=t or "", metadata=m or {}, id=i)
                   for i, t, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True)]
            offset += len(got["ids"])
            if len(got["ids"]) < page:
                return
    elif kind == "qdrant":
        after = None
        while True:
            points, after = store.client.scroll(store.collection_name, limit=page, offset=after, with_payload=True,
                                                with_vectors=False)
            yield [store._document_from_point(p, store.collection_name, store.content_payload_key,
                                              store.metadata_payload_key) for p in points]
            if after is None:
                return
    elif kind == "in-memory":
        items = list(store.store.values())
        for start in range(0, max(1, len(items)), page):
            yield [Document(page_content=d["text"], metadata=d.get("metadata") or {}, id=d["id"])
                   for d in items[start : start + page]]
    else:  # faiss
        rows = sorted(store.index_to_docstore_id.items())
        for start in range(0, max(1, len(rows)), page):
            part = rows[start : start + page]
            yield [Document(page_content=d.page_content, metadata=d.metadata, id=cid)
                   for d, (_, cid) in zip((store.docstore.search(cid) for _, cid in part), part, strict=True)]


def store_name(store: VectorStore) -> str:
    """How messages name a store: a Chroma or Qdrant collection by its name, any other by its class."""
    kind = langchain_store_kind(store)
    if kind == "chroma":
        return f"the Chroma collection {store._collection.name!r}"  # type: ignore[attr-defined]
    if kind == "qdrant":
        return f"the Qdrant collection {store.collection_name!r}"  # type: ignore[attr-defined]
    return type(store).__name__



def stored_ids(store: VectorStore, ids: Sequence[str]) -> set[str]:
    """Which of `ids` a LangChain vector store holds: Chroma's collection is asked directly (its `get_by_ids`
    fails on a document stored without metadata), any other store through `get_by_ids` (Qdrant's ids compared as
    UUIDs, the only ids it takes besides integers).

    Raises:
        ValueError: the store cannot look documents up by id, so qrag cannot keep its rule (adding an id that
            exists or deleting one that does not is refused): change that store through its own API.
    """
    if not ids:
        return set()
    kind = langchain_store_kind(store)
    if kind == "chroma":
        return set(store._collection.get(ids=list(ids), include=[])["ids"])  # type: ignore[attr-defined]
    try:
        found = store.get_by_ids(list(ids))
    except NotImplementedError:
        raise ValueError(
            f"{type(store).__name__} cannot look documents up by id (get_by_ids), so qrag cannot check that an added "
            "id is new and a deleted one exists; add to and delete from that store through its own API."
        ) from None
    held = {str(d.id if d.id is not None else d.metadata.get("_id")) for d in found}  # Qdrant: metadata `_id`
    if kind == "qdrant":  # it returns a UUID in its dashed form whatever form was given
        return {i for i in ids if uuid_form(i) in held}
    return held & set(ids)


def uuid_form(cid: str) -> str:
    try:
        return str(uuid.UUID(cid))
    except ValueError:
        return cid


def store_size(store: VectorStore) -> int | None:
    """How many documents a LangChain vector store holds, where it can be told (Chroma, Qdrant, in-memory)."""
    kind = langchain_store_kind(store)
    if kind == "chroma":
        return int(store._collection.count())  # type: ignore[attr-defined]
    if kind == "qdrant":
        return int(store.client.count(store.collection_name, exact=True).count)  # type: ignore[attr-defined]
    if kind == "in-memory":
        return len(store.store)  # type: ignore[attr-defined]
    return None
