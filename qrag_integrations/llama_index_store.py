"""A `ChunkStore` over a LlamaIndex vector store: multi-hop search against a vector database.

It goes through LlamaIndex's own integration for the database (e.g. `ChromaVectorStore` on a Chroma server).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
from llama_index.core.schema import MetadataMode
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery

from qrag.integrations.llama_index_filters import to_metadata_filters
from qrag.integrations.metric import MetricError, check_chroma_ip
from qrag.training.search import Chunk, Filter, ScoredChunk, search_rows

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
        `MetadataFilters`, so filtered search runs in the database."""
        filters = None if where is None else to_metadata_filters(where)

        def fetch(vector: list[float], n: int) -> list[tuple[Chunk, float]]:
            result = self.store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=n, filters=filters))
            pairs = zip(result.nodes or [], result.similarities or [], strict=True)
            return [(self._chunk(node), self.inner_product(float(s))) for node, s in pairs]

        return search_rows(queries, k, exclude, fetch)

    def _chunk(self, node: Any) -> Chunk:
        meta = dict(node.metadata or {})
        pos = meta.get(self.position_key) if self.position_key else None
        return Chunk(str(node.node_id), node.get_content(metadata_mode=MetadataMode.NONE), meta,
                     int(pos) if pos is not None else None)


__all__ = ["LlamaIndexChunkStore", "MetricError", "llama_index_inner_product"]
