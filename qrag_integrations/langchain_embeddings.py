"""LangChain `Embeddings` over the two towers, and a `ChunkStore` over any LangChain vector store.

Together they are the scale-out path: chunk vectors g_φ(c) don't depend on the question (position mode
'none'), so a vector database with a dot-product metric can hold them and serve every hop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import torch
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from qrag.integrations.metric import MetricError, check_chroma_ip
from qrag.integrations.store_filters import store_filter
from qrag.training.model import QNetwork, model_lock
from qrag.training.search import (
    Chunk,
    Filter,
    ScoredChunk,
    check_ids,
    check_query,
    check_text_list,
    load_model,
    search_rows,
)

POSITION_KEY = "qrag_position"


VectorSearch = Callable[..., list[tuple[Any, float]]]


def langchain_vector_search(store: VectorStore) -> tuple[VectorSearch, Callable[[float], float]]:
    """A LangChain store's search by vector with scores, and the map from its score to ⟨query, g_φ(c)⟩,
    after checking that the store ranks by that inner product.

    Known stores are checked: Chroma needs an 'ip' space (its score is the distance 1 − ⟨q, c⟩), Qdrant
    `Distance.DOT` (score = ⟨q, c⟩); LangChain's `InMemoryVectorStore` (cosine) is refused. Other stores'
    `similarity_search_with_score_by_vector` is trusted to return raw inner products.

    Raises:
        MetricError: the store ranks by cosine or L2.
        TypeError: the store cannot search by vector with scores.
    """
    kind = type(store).__name__
    if kind == "Chroma" and type(store).__module__.startswith("langchain_chroma"):
        check_chroma_ip(store._collection)  # type: ignore[attr-defined]
        search = store.similarity_search_by_vector_with_relevance_scores  # type: ignore[attr-defined]
        return search, lambda distance: 1.0 - distance
    search = getattr(store, "similarity_search_with_score_by_vector", None)
    if not callable(search):
        raise TypeError(
            f"{kind} has no similarity_search_with_score_by_vector(); qrag needs the raw inner products of a "
            "vector search (e.g. Chroma with an 'ip' collection, or QdrantVectorStore with distance=Distance.DOT)."
        )
    if kind == "QdrantVectorStore":
        distance = str(getattr(store, "distance", ""))
        if not distance.upper().endswith("DOT"):
            raise MetricError(f"the Qdrant collection uses {distance!r}; qrag's hops need inner products: create it "
                              "with distance=Distance.DOT.")
        return search, lambda score: score
    if kind == "InMemoryVectorStore":
        raise MetricError("InMemoryVectorStore ranks by cosine similarity, not the inner product qrag's hops need; "
                          "use a store with a dot-product metric (Chroma 'ip', Qdrant DOT) or qrag's ChunkIndex.")
    return search, lambda score: score


class QRAGEmbeddings(Embeddings):
    """The chunk tower for documents, the state tower on the bare question for queries.

    `embed_query(q)` is f_θ(q), the state before any hop, so a plain similarity search of a store built
    with `embed_documents` returns exactly qrag's first-hop ranking (inner product = Q-value; use a
    dot-product metric, not cosine). Later hops need `QRAGRetriever.from_vector_store`.

    Args:
        model: A `QNetwork`, a checkpoint folder, or an encoder name (untrained).
        batch_size: Texts per encoder batch.

    Example:
        >>> emb = QRAGEmbeddings("all-MiniLM-L6-v2")
        >>> len(emb.embed_documents(["Mary took the milk."])[0]), len(emb.embed_query("Where is the milk?"))
        (384, 384)
    """

    def __init__(self, model: QNetwork | str | Path, *, batch_size: int = 128) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
        self.model = load_model(model).eval()
        self.batch_size = batch_size

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        texts = check_text_list(texts, "texts")
        self.model.check_chunk_lengths(texts)  # one ChunkLengthWarning when chunks would be cut
        with model_lock(self.model):
            vectors = self.model.embed_chunks(texts, batch_size=self.batch_size)  # (N, D)
        return vectors.cpu().tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        check_query(text, "QRAGEmbeddings.embed_query")
        with model_lock(self.model):
            state = self.model.embed_states([text], [[]], batch_size=self.batch_size)  # (1, D)
        return state[0].cpu().tolist()  # type: ignore[no-any-return]


def store_metric(store: VectorStore) -> str | None:
    """The similarity a LangChain vector store ranks by, lower-cased ('dot', 'cosine', 'euclidean', ...), or
    None when it cannot be told (Qdrant `distance`, FAISS/PGVector `distance_strategy`, Chroma `hnsw:space`;
    `InMemoryVectorStore` is always cosine)."""
    from langchain_core.vectorstores import InMemoryVectorStore

    if isinstance(store, InMemoryVectorStore):
        return "cosine"
    for attr in ("distance", "distance_strategy", "_distance_strategy"):
        value = getattr(store, attr, None)
        if value is not None:
            return str(getattr(value, "value", value)).lower()
    meta = getattr(getattr(store, "_collection", None), "metadata", None)
    if isinstance(meta, dict):
        return str(meta.get("hnsw:space", "l2")).lower()
    return None


class LangChainChunkStore:
    """A `qrag.training.search.index.ChunkStore` over a LangChain `VectorStore` that searches by vector with scores.

    The store must rank by the raw inner product (Chroma with an 'ip' space, Qdrant with `Distance.DOT`;
    checked by `langchain_inner_product`, which also turns Chroma's distances back into inner products)
    and hold vectors from the same model's chunk tower (`QRAGEmbeddings`). Taken chunks are masked by
    over-fetching `k + len(taken)` results and dropping the taken ids.

    Args:
        store: The vector store, with `similarity_search_with_score_by_vector(vector, k=...)`.
        position_key: Metadata key holding each chunk's document position (for document order).
        id_key: Metadata key holding the chunk id; None: `Document.id`, then metadata `_id` (Qdrant).
    """

    def __init__(self, store: VectorStore, *, position_key: str | None = POSITION_KEY, id_key: str | None = None) -> None:
        self.store = store
        self.vector_search, self.inner_product = langchain_vector_search(store)
        self.position_key = position_key
        self.id_key = id_key

    def search(
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]] | None = None,
        where: Filter | None = None,
    ) -> list[list[ScoredChunk]]:
        """The `k` best chunks per query row, the excluded ids dropped; `where` goes to the store as its own filter
        (`store_filters.store_filter`), so filtered search runs in the database. A filter that lets no chunk through
        (`in []`) finds nothing without asking the store; one without conditions (`{}`) is no filter.

        Raises:
            FilterError: a filter the store cannot hold as qrag means it (named, before the store is asked).
        """
        reduced = True if where is None else where.reduce()
        if reduced is False:
            return [[] for _ in range(queries.shape[0])]
        extra = {} if reduced is True else self._filter_args(reduced)

        def fetch(vector: list[float], n: int) -> list[tuple[Chunk, float]]:
            return [(self._chunk(doc), self.inner_product(float(score)))
                    for doc, score in self.vector_search(vector, k=n, **extra)]

        return search_rows(queries, k, exclude, fetch)

    def _filter_args(self, where: Filter) -> dict[str, Any]:
        """The store search's keyword arguments for `where`. LangChain's FAISS filters only the `fetch_k` best
        candidates (20 by default), so a filtered search there fetches every stored vector: exact, at the cost of a
        full scan (a flat FAISS index scans them all anyway)."""
        args: dict[str, Any] = {"filter": store_filter(self.store, where)}
        if type(self.store).__name__ == "FAISS":
            args["fetch_k"] = max(1, int(self.store.index.ntotal))  # type: ignore[attr-defined]
        return args

    # ------------------------------------------------------------------ a living store
    def add_texts(self, texts: list[str], metadatas: list[dict[str, Any]], ids: Sequence[str] | None) -> list[str]:
        """Add checked texts to the store under `ids` (default: new random ids); returns the ids.

        Raises:
            ValueError: an id the store already holds (named; nothing is added: stores differ, Chroma would
                overwrite it, so qrag refuses as its own index does), or a store that cannot look ids up.
        """
        new_ids = check_ids([uuid.uuid4().hex for _ in texts] if ids is None else ids, len(texts))
        held = stored_ids(self.store, new_ids)
        taken = [i for i in new_ids if i in held]
        if taken:
            raise ValueError(f"ids {taken[:5]} are already in this {type(self.store).__name__} store; delete them "
                             "first to replace them, or add the texts under new ids. Nothing was added.")
        return list(self.store.add_texts(texts, metadatas, ids=new_ids))

    def delete(self, ids: list[str]) -> None:
        """Delete these ids from the store.

        Raises:
            ValueError: an id the store does not hold (named; nothing is deleted: Chroma and Qdrant would ignore
                it), a deletion that would empty the store, or a store that cannot look ids up.
        """
        kind = type(self.store).__name__
        held = stored_ids(self.store, ids)
        missing = sorted({i for i in ids if i not in held})
        if missing:
            raise ValueError(f"ids {missing[:5]} are not in this {kind} store; nothing was deleted.")
        size = store_size(self.store)
        if size is not None and ids and len(set(ids)) >= size:
            raise ValueError(f"cannot delete every document of this {kind} store; build a new one for a new corpus.")
        if ids:
            self.store.delete(ids=ids)

    def _chunk(self, doc: Any) -> Chunk:
        meta = dict(doc.metadata or {})
        cid = meta.get(self.id_key) if self.id_key else (doc.id if doc.id is not None else meta.get("_id"))
        if cid is None:
            raise ValueError(
                f"{type(self.store).__name__} returned a document without an id; store ids with the texts or "
                "pass id_key= naming the metadata key that holds them."
            )
        pos = meta.get(self.position_key) if self.position_key else None
        return Chunk(str(cid), doc.page_content, meta, int(pos) if pos is not None else None)


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
    if type(store).__name__ == "Chroma":
        return set(store._collection.get(ids=list(ids), include=[])["ids"])  # type: ignore[attr-defined]
    try:
        found = store.get_by_ids(list(ids))
    except NotImplementedError:
        raise ValueError(
            f"{type(store).__name__} cannot look documents up by id (get_by_ids), so qrag cannot check that an added "
            "id is new and a deleted one exists; add to and delete from that store through its own API."
        ) from None
    held = {str(d.id if d.id is not None else d.metadata.get("_id")) for d in found}  # Qdrant: metadata `_id`
    if type(store).__name__ == "QdrantVectorStore":  # it returns a UUID in its dashed form whatever form was given
        return {i for i in ids if _uuid_form(i) in held}
    return held & set(ids)


def _uuid_form(cid: str) -> str:
    try:
        return str(uuid.UUID(cid))
    except ValueError:
        return cid


def store_size(store: VectorStore) -> int | None:
    """How many documents a LangChain vector store holds, where it can be told (Chroma, Qdrant, in-memory)."""
    kind = type(store).__name__
    if kind == "Chroma":
        return int(store._collection.count())  # type: ignore[attr-defined]
    if kind == "QdrantVectorStore":
        return int(store.client.count(store.collection_name, exact=True).count)  # type: ignore[attr-defined]
    if kind == "InMemoryVectorStore":
        return len(store.store)  # type: ignore[attr-defined]
    return None
