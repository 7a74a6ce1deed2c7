"""A `ChunkStore` over a LlamaIndex vector store: multi-hop search against a vector database.

It goes through LlamaIndex's own integration for the database (e.g. `ChromaVectorStore` on a Chroma server).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from qrag.integrations.llama_index_filters import to_metadata_filters
from qrag.integrations.metric import MetricError, check_chroma_ip
from qrag.training.search import Chunk, Filter, ScoredChunk, check_ids, search_rows

POSITION_KEY = "qrag_position"


def llama_index_inner_product(store: BasePydanticVectorStore) -> Callable[[float], float]:
    """Map a LlamaIndex store's query similarity to ⟨query, g_φ(c)⟩, after checking its metric.

    `ChromaVectorStore` needs an 'ip' collection; it reports `exp(−distance)` with distance `1 − ⟨q, c⟩`,
    so the inner product is `1 + ln(similarity)`. Other stores are trusted to return raw inner products.

    Raises:
        MetricError: a Chroma collection that ranks by cosine or L2.
    """
    if type(store).__name__ == "ChromaVectorStore":
        check_chroma_ip(store._collection)  # type: ignore[attr-defined]
        return lambda similarity: 1.0 + math.log(similarity) if similarity > 0 else -math.inf
    return lambda score: score


class LlamaIndexChunkStore:
    """A `qrag.training.search.index.ChunkStore` over a LlamaIndex `BasePydanticVectorStore` with stored text.

    The store holds `QRAGLlamaIndexEmbedding` vectors (the chunk tower) and must rank by inner product
    (checked for Chroma). Taken chunks are masked by over-fetching `k + len(taken)` results.

    Args:
        store: The vector store (`stores_text=True`).
        position_key: Node metadata key holding each chunk's document position (for document order).

    Raises:
        TypeError: the store does not keep node text.
        MetricError: the store ranks by cosine or L2.
    """

    def __init__(self, store: BasePydanticVectorStore, *, position_key: str | None = POSITION_KEY) -> None:
        if not getattr(store, "stores_text", False):
            raise TypeError(f"{type(store).__name__} does not store node text; qrag's hops need the chunk text back "
                            "from the store (use a store with stores_text=True, e.g. ChromaVectorStore).")
        self.store = store
        self.inner_product = llama_index_inner_product(store)
        self.position_key = position_key

    def search(
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]] | None = None,
        where: Filter | None = None,
    ) -> list[list[ScoredChunk]]:
        """The `k` best chunks per query row, the excluded ids dropped; `where` goes to the store's own query as
        `MetadataFilters` (`llama_index_filters.to_metadata_filters`), so filtered search runs in the database. A
        filter that lets no chunk through (`in []`) finds nothing without asking the store; one without conditions
        is no filter.

        Raises:
            FilterError: a filter the store cannot hold as qrag means it (named, before the store is asked).
        """
        reduced = True if where is None else where.reduce()
        if reduced is False:
            return [[] for _ in range(queries.shape[0])]
        filters = None if reduced is True else to_metadata_filters(reduced, type(self.store).__name__)

        def fetch(vector: list[float], n: int) -> list[tuple[Chunk, float]]:
            result = self.store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=n, filters=filters))
            pairs = zip(result.nodes or [], result.similarities or [], strict=True)
            return [(self._chunk(node), self.inner_product(float(s))) for node, s in pairs]

        return search_rows(queries, k, exclude, fetch)

    # ------------------------------------------------------------------ a living store
    def add(self, nodes: Sequence[BaseNode], embed: Callable[[list[str]], list[list[float]]]) -> None:
        """Add `nodes` to the store, those without a vector embedded by `embed` (texts as `MetadataMode.EMBED`
        renders them) once their ids are checked.

        Raises:
            ValueError: a node id the store already holds, or one given twice (named; nothing is added: stores
                differ, Chroma would overwrite it), or a store that cannot look ids up.
        """
        ids = check_ids([n.node_id for n in nodes], len(nodes))
        held = self.stored_ids(ids)
        taken = [i for i in ids if i in held]
        if taken:
            raise ValueError(f"ids {taken[:5]} are already in this {type(self.store).__name__}; delete them first to "
                             "replace them, or insert the nodes under new ids. Nothing was added.")
        todo = [n for n in nodes if n.embedding is None]
        vectors = dict(zip([n.node_id for n in todo],
                           embed([n.get_content(metadata_mode=MetadataMode.EMBED) for n in todo]), strict=True))
        self.store.add([n.model_copy(update={"embedding": vectors[n.node_id]}) if n.node_id in vectors else n
                        for n in nodes])

    def delete(self, node_ids: list[str]) -> None:
        """Delete these node ids from the store.

        Raises:
            ValueError: an id the store does not hold (named; nothing is deleted), a deletion that would empty
                the store, or a store that cannot look ids up.
        """
        kind = type(self.store).__name__
        held = self.stored_ids(node_ids)
        missing = sorted({i for i in node_ids if i not in held})
        if missing:
            raise ValueError(f"ids {missing[:5]} are not in this {kind}; nothing was deleted.")
        size = self.size()
        if size is not None and node_ids and len(set(node_ids)) >= size:
            raise ValueError(f"cannot delete every node of this {kind}; build a new one for a new corpus.")
        if node_ids:
            self.store.delete_nodes(node_ids)

    def ref_doc_node_ids(self, ref_doc_id: str) -> list[str]:
        """The ids of the stored nodes whose source document is `ref_doc_id` (LlamaIndex stores it in each node's
        `document_id` metadata)."""
        filters = MetadataFilters(filters=[MetadataFilter(key="document_id", value=ref_doc_id)])
        return [n.node_id for n in self._get_nodes(node_ids=None, filters=filters)]

    def stored_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of `ids` the store holds."""
        return {n.node_id for n in self._get_nodes(node_ids=list(ids))} if ids else set()

    def size(self) -> int | None:
        """How many nodes the store holds, where it can be told (Chroma)."""
        collection = getattr(self.store, "_collection", None)
        return int(collection.count()) if type(self.store).__name__ == "ChromaVectorStore" and collection else None

    def _get_nodes(self, **query: Any) -> list[BaseNode]:
        try:
            return list(self.store.get_nodes(**query))
        except NotImplementedError:
            raise ValueError(
                f"{type(self.store).__name__} cannot look nodes up (get_nodes), so qrag cannot check that an inserted "
                "id is new and a deleted one exists; insert into and delete from that store through its own API."
            ) from None

    def _chunk(self, node: Any) -> Chunk:
        meta = dict(node.metadata or {})
        pos = meta.get(self.position_key) if self.position_key else None
        return Chunk(str(node.node_id), node.get_content(metadata_mode=MetadataMode.NONE), meta,
                     int(pos) if pos is not None else None)


__all__ = ["LlamaIndexChunkStore", "MetricError", "llama_index_inner_product"]
