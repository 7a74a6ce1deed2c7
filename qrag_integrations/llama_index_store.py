"""A `ChunkStore` over a LlamaIndex vector store: multi-hop search against a vector database.

It goes through LlamaIndex's own integration for the database (e.g. `ChromaVectorStore` on a Chroma server).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import OrderedDict
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

from qrag.integrations.llama_index_filters import is_chroma_store, metadata_filters_for
from qrag.integrations.metric import (
    CHROMA_CONVENTIONS,
    SAMPLE,
    MetricError,
    ScoreMap,
    checked_score_map,
    chroma_space,
    fresh_unit_vectors,
)
from qrag.integrations.store_filters import ValueShapes, check_store_can_mean
from qrag.integrations.store_lexical import Hybrid, StoreLexical
from qrag.integrations.store_writes import checked_delete, refuse_held, writer_lock
from qrag.training.model import QNetwork
from qrag.training.search import Chunk, Filter, ScoredChunk, check_ids, search_rows

POSITION_KEY = "qrag_position"




def llama_index_score_map(store: BasePydanticVectorStore) -> ScoreMap | None:
    """How a LlamaIndex store's query similarity (after `distance`) gives ⟨query, x⟩; None where it does not say.

    `ChromaVectorStore` reports `exp(−distance)` with Chroma's distance for its space ('ip' 1 − ⟨q, x⟩, 'cosine'
    1 − cos, 'l2' squared L2); `distance` takes the logarithm back. A subclass of a store is read as the store."""
    if is_chroma_store(store):
        space = chroma_space(store._collection)  # type: ignore[attr-defined]
        return ScoreMap(CHROMA_CONVENTIONS[space]) if space in CHROMA_CONVENTIONS else None
    return None


SEEN_NODES = 4096
"""Most nodes a store adapter keeps of those its store returned (to hand back whole)."""


def _distance(similarity: float) -> float:
    return -math.log(similarity) if similarity > 0 else math.inf


class LlamaIndexChunkStore:
    """A `qrag.training.search.index.ChunkStore` over a LlamaIndex `BasePydanticVectorStore` with stored text.

    The store holds this model's chunk vectors: `QRAGLlamaIndexEmbedding` under an inner-product metric, or, for a
    model whose chunk tower is the untrained normalised base encoder, a cosine or L2 collection that encoder filled
    (Chroma's default 'l2'; checked on a few stored nodes before the first query, as `LangChainChunkStore` does).
    Taken chunks are masked by over-fetching `k + len(taken)` results. A searcher whose model weighs lexical evidence
    reads the store's nodes once (`with_lexical`, Chroma) and keeps their BM25 index in step through `add` / `delete`.

    Args:
        store: The vector store (`stores_text=True`).
        model: The model that searches it (see `LangChainChunkStore`).
        position_key: Node metadata key holding each chunk's document position (for document order).

    Raises:
        TypeError: the store does not keep node text.
        MetricError: a cosine or L2 store this model cannot read Q-values from, or one another encoder filled.
    """

    def __init__(self, store: BasePydanticVectorStore, *, model: QNetwork | None = None,
                 position_key: str | None = POSITION_KEY) -> None:
        if not getattr(store, "stores_text", False):
            raise TypeError(f"{type(store).__name__} does not store node text; qrag's hops need the chunk text back "
                            "from the store (use a store with stores_text=True, e.g. ChromaVectorStore).")
        self.store = store
        self.position_key = position_key
        self._exp = is_chroma_store(store)
        self.text_index: StoreLexical | None = None
        self._seen: OrderedDict[str, BaseNode] = OrderedDict()  # the nodes the store returned lately, by id
        self._seen_lock = threading.Lock()
        self._shapes = ValueShapes()  # `_value_shapes`
        where = (f"the Chroma collection {store._collection.name!r}" if self._exp  # type: ignore[attr-defined]
                 else type(store).__name__)

        def sample(mode: MetadataMode) -> tuple[list[str], list[list[float]] | None]:
            if self._exp:
                got = store._collection.get(limit=SAMPLE, include=["embeddings"])  # type: ignore[attr-defined]
                nodes = {n.node_id: n for n in self._get_nodes(node_ids=list(got["ids"]))}
                return ([nodes[i].get_content(metadata_mode=mode) for i in got["ids"]],
                        [list(map(float, v)) for v in got["embeddings"]])
            assert model is not None
            return [t for t, _ in search(fresh_unit_vectors(model, ["?"])[0].tolist(), SAMPLE, mode)], None

        def search(vector: list[float], n: int, mode: MetadataMode = MetadataMode.EMBED) -> list[tuple[str, float]]:
            result = store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=n))
            return [(node.get_content(metadata_mode=mode), self._raw(float(s)))
                    for node, s in zip(result.nodes or [], result.similarities or [], strict=True)]

        known = llama_index_score_map(store)
        try:  # nodes embedded as LlamaIndex's ingestion renders them (their metadata included) ...
            self.score_map = checked_score_map(where, model, known, lambda: sample(MetadataMode.EMBED), search)
        except MetricError as embedded:  # ... or their text alone (vectors given with the nodes)
            try:
                self.score_map = checked_score_map(where, model, known, lambda: sample(MetadataMode.NONE),
                                                   lambda v, n: search(v, n, MetadataMode.NONE))
            except MetricError:
                raise embedded from None

    def _raw(self, similarity: float) -> float:
        """The store's own score: Chroma's distance under LlamaIndex's exp(−distance)."""
        return _distance(similarity) if self._exp else similarity

    def search(
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]] | None = None,
        where: Filter | None = None,
    ) -> list[list[ScoredChunk]]:
        """The `k` best chunks per query row, the excluded ids dropped; `where` goes to the store's own query as
        `MetadataFilters` (`llama_index_filters.metadata_filters_for`), so filtered search runs in the database. A
        filter that lets no chunk through (`in []`) finds nothing without asking the store; one without conditions
        is no filter.

        Raises:
            FilterError: a filter the store cannot hold as qrag means it (named, before the store is asked).
        """
        reduced = True if where is None else where.reduce()
        if reduced is False:
            return [[] for _ in range(queries.shape[0])]
        if reduced is not True and self._exp:
            check_store_can_mean("llama-index-chroma", reduced, self._value_shapes(), type(self.store).__name__)
        filters = None if reduced is True else metadata_filters_for(self.store)(reduced)

        def fetch(vector: list[float], n: int) -> list[tuple[Chunk, float]]:
            result = self.store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=n, filters=filters))
            pairs = zip(result.nodes or [], result.similarities or [], strict=True)
            qnorm = math.sqrt(sum(v * v for v in vector))
            return [(self._chunk(node), self.score_map.inner(self._raw(float(s)), qnorm) if not self._exp or s > 0
                     else -math.inf) for node, s in pairs]

        return search_rows(queries, k, exclude, fetch)

    def with_lexical(self, *, pairs: bool = False) -> bool:
        """Read the store's nodes once and index their texts for BM25 (`MetadataMode.EMBED`, what `from_defaults`
        indexes); False for a store qrag cannot read whole (only Chroma is read). Built under the store's writer lock,
        as `LangChainChunkStore.with_lexical`."""
        if self.text_index is not None and (self.text_index.pairs or not pairs):
            return True
        if not self._exp:
            return False
        with writer_lock(self.store):
            if self.text_index is None or (pairs and not self.text_index.pairs):
                nodes = self._get_nodes(node_ids=None)
                self.text_index = StoreLexical([n.node_id for n in nodes], _embed_texts(nodes),
                                               [dict(n.metadata or {}) for n in nodes], pairs=pairs)
        return True

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """Hold the store for reading from a search's first hop to its last (`store_writes.StoreLock`)."""
        return writer_lock(self.store).reading()

    def memory(self) -> dict[str, int]:
        """Bytes qrag holds beside the store: its BM25 index of the nodes (`StoreLexical.memory`)."""
        if self.text_index is None:
            return {"lexical": 0, "ids": 0, "metadata": 0}
        return self.text_index.memory()

    def lexical_search(self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]], where: Filter | None,
                       *, texts: Sequence[str], questions: Sequence[str], weight: float,
                       pair_weight: float) -> list[list[Hybrid]]:
        """Per query row: the `k` best (chunk, Q-value, Q + `weight` · lexical evidence), as an in-process index ranks."""
        assert self.text_index is not None, "with_lexical() first"
        return self.text_index.search(lambda q, n, skip, w: self.search(q, n, skip, w), queries, k, exclude, where,
                                      texts, questions, weight, pair_weight, held=self.stored_ids,
                                      lookup=self._lookup)

    def _lookup(self, ids: Sequence[str]) -> list[tuple[Chunk, Sequence[float]]]:
        """Those of `ids` the Chroma collection holds, as chunks with their stored vectors (what a hop scores exactly
        instead of asking the store for more)."""
        got = self.store._collection.get(ids=list(ids), include=["embeddings"])  # type: ignore[attr-defined]
        vectors = dict(zip(got["ids"], got["embeddings"], strict=True))  # Chroma's NumPy rows
        if not vectors:
            return []  # (get_nodes without ids would read the whole store)
        return [(self._chunk(n), vectors[n.node_id]) for n in self._get_nodes(node_ids=list(vectors))
                if n.node_id in vectors]

    # ------------------------------------------------------------------ a living store
    def add(self, nodes: Sequence[BaseNode], embed: Callable[[list[str]], list[list[float]]]) -> None:
        """Add `nodes` to the store, those without a vector embedded by `embed` (texts as `MetadataMode.EMBED`
        renders them) once their ids are checked.

        The ids are checked again, and the nodes added, under the store's writer lock (`store_writes.writer_lock`,
        one per store object, shared by every qrag retriever over it; embedding runs outside it), so two inserts of
        one id in this process give one insert and one refusal. Writers in other processes are not covered: the
        database must enforce unique ids itself.

        Raises:
            ValueError: a node id the store already holds, or one given twice (named; nothing is added: stores
                differ, Chroma would overwrite it), or a store that cannot look ids up.
        """
        ids = check_ids([n.node_id for n in nodes], len(nodes))
        self._check_new(ids)  # before embedding: a refused insert costs no encoder pass
        todo = [n for n in nodes if n.embedding is None]
        vectors = dict(zip([n.node_id for n in todo],
                           embed([n.get_content(metadata_mode=MetadataMode.EMBED) for n in todo]), strict=True))
        with writer_lock(self.store):
            self._check_new(ids)  # another writer may have added one meanwhile
            self.store.add([n.model_copy(update={"embedding": vectors[n.node_id]}) if n.node_id in vectors else n
                            for n in nodes])
            if self.text_index is not None:
                self.text_index.added([n.node_id for n in nodes], _embed_texts(nodes),
                                      [dict(n.metadata or {}) for n in nodes])
            self._shapes.took([dict(n.metadata or {}) for n in nodes])

    def _check_new(self, ids: Sequence[str]) -> None:
        refuse_held(ids, self.stored_ids, f"this {type(self.store).__name__}", "insert the nodes under new ids")

    def delete(self, node_ids: list[str]) -> None:
        """Delete these node ids from the store, the check and the delete under the store's writer lock (as `add`).

        Raises:
            ValueError: an id the store does not hold (named; nothing is deleted), a deletion that would empty
                the store, or a store that cannot look ids up.
        """
        def delete() -> None:
            self.store.delete_nodes(node_ids)
            if self.text_index is not None:
                self.text_index.deleted(set(node_ids))

        checked_delete(self.store, node_ids, self.stored_ids, self.size, delete, f"this {type(self.store).__name__}",
                       "node")

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
        return int(collection.count()) if is_chroma_store(self.store) and collection else None

    def _get_nodes(self, **query: Any) -> list[BaseNode]:
        try:
            return list(self.store.get_nodes(**query))
        except NotImplementedError:
            raise ValueError(
                f"{type(self.store).__name__} cannot look nodes up (get_nodes), so qrag cannot check that an inserted "
                "id is new and a deleted one exists; insert into and delete from that store through its own API."
            ) from None

    def _chunk(self, node: Any) -> Chunk:
        """A returned node as a chunk: its text as embedded (`MetadataMode.EMBED`, what `from_defaults` indexes and
        what a later hop's state reads), its metadata; the node itself is kept for `node` to hand back whole."""
        meta = dict(node.metadata or {})
        pos = meta.get(self.position_key) if self.position_key else None
        with self._seen_lock:
            self._seen[str(node.node_id)] = node
            self._seen.move_to_end(str(node.node_id))
            while len(self._seen) > SEEN_NODES:
                self._seen.popitem(last=False)
        return Chunk(str(node.node_id), node.get_content(metadata_mode=MetadataMode.EMBED), meta,
                     int(pos) if pos is not None else None)

    def _value_shapes(self) -> dict[str, set[str]]:
        """Which metadata keys of the stored nodes hold lists or dicts (`store_filters.ValueShapes`)."""
        return self._shapes.current(None if self.text_index is None else self.text_index.version,
                                    lambda: [[dict(n.metadata or {}) for n in self._get_nodes(node_ids=None)]])

    def node(self, node_id: str) -> BaseNode | None:
        """The node the store last returned under `node_id` (metadata, relationships and exclusions as stored; None
        when it was not returned lately)."""
        with self._seen_lock:
            return self._seen.get(node_id)


def _embed_texts(nodes: Sequence[BaseNode]) -> list[str]:
    """What BM25 reads of each node: its text as embedded (`MetadataMode.EMBED`), as `from_defaults` indexes it."""
    return [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]


__all__ = ["LlamaIndexChunkStore", "MetricError", "llama_index_score_map"]
