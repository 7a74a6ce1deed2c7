"""LangChain `Embeddings` over the two towers, and a `ChunkStore` over any LangChain vector store.

Together they are the scale-out path: chunk vectors g_φ(c) don't depend on the question (position mode
'none'), so a vector database with a dot-product metric can hold them and serve every hop.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import torch
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from qrag.integrations.langchain_stores import (
    READABLE,
    document_pages,
    documents_by_id,
    langchain_vector_search,
    read_documents,
    store_name,
    store_size,
    stored_ids,
    uuid_form,
)
from qrag.integrations.metric import (
    SAMPLE,
    ScoreMap,
    checked_score_map,
    fresh_unit_vectors,
)
from qrag.integrations.store_filters import (
    ValueShapes,
    check_store_can_mean,
    langchain_store_kind,
    store_filter,
)
from qrag.integrations.store_lexical import Hybrid, StoreLexical
from qrag.integrations.store_writes import checked_delete, refuse_held, writer_lock
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


class LangChainChunkStore:
    """A `qrag.training.search.index.ChunkStore` over a LangChain `VectorStore` that searches by vector with scores.

    The store holds this model's chunk vectors: `QRAGEmbeddings` under an inner-product metric (Chroma 'ip', Qdrant
    `Distance.DOT`, FAISS `MAX_INNER_PRODUCT`), or, for a model whose chunk tower is the untrained normalised base
    encoder (`qrag/hotpotqa-minilm`: all-MiniLM-L6-v2), any cosine or L2 collection that encoder filled (Chroma's
    default 'l2', `InMemoryVectorStore`, Qdrant COSINE, FAISS's default L2): each score is turned back into the
    exact inner product ⟨q, x⟩ (`metric.ScoreMap`). Before the first query such a store is checked on a few stored
    documents (`SAMPLE`): their stored vectors against this chunk tower's vectors of their texts, and the store's
    score of each against 3 × its own vector, which also tells the metric of a store that does not say it. Taken
    chunks are masked by over-fetching `k + len(taken)` results and dropping the taken ids.

    A searcher whose model weighs lexical evidence reads the store's documents once (`with_lexical`) and holds
    their BM25 index beside it, kept in step by `add_texts` / `delete` (documents changed in the store past qrag
    rank by Q alone until a new retriever reads them).

    Args:
        store: The vector store, with `similarity_search_with_score_by_vector(vector, k=...)`.
        model: The model that searches it (its chunk tower is what the check compares with); None: an inner-product
            store (or one that does not say its metric) is trusted, a cosine or L2 one refused.
        position_key: Metadata key holding each chunk's document position (for document order).
        id_key: Metadata key holding the chunk id; None: `Document.id`, then metadata `_id` (Qdrant).

    Raises:
        MetricError: a cosine or L2 store for a model whose chunk tower is not the untrained normalised base
            encoder, or one that encoder did not fill (named: the norms or the cosine found).
    """

    def __init__(self, store: VectorStore, *, model: QNetwork | None = None, position_key: str | None = POSITION_KEY,
                 id_key: str | None = None) -> None:
        self.store = store
        self.position_key = position_key
        self.id_key = id_key
        self.vector_search, known = langchain_vector_search(store)
        self.score_map = self._checked_map(model, known)
        self.text_index: StoreLexical | None = None
        self._shapes = ValueShapes()  # `_value_shapes`

    def _checked_map(self, model: QNetwork | None, known: ScoreMap | None) -> ScoreMap:
        def sample() -> tuple[list[str], list[list[float]] | None]:
            read = read_documents(self.store, SAMPLE)
            if read is not None:
                return [d.page_content for d in read[0]], read[1]
            probe = fresh_unit_vectors(model, ["?"])[0].tolist()
            return [d.page_content for d, _ in self.vector_search(probe, k=SAMPLE)], None

        def search(vector: list[float], n: int) -> list[tuple[str, float]]:
            return [(d.page_content, float(score)) for d, score in self.vector_search(vector, k=n)]

        return checked_score_map(store_name(self.store), model, known, sample, search)

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
            qnorm = math.sqrt(sum(v * v for v in vector))
            return [(self._chunk(doc), self.score_map.inner(float(score), qnorm))
                    for doc, score in self.vector_search(vector, k=n, **extra)]

        return search_rows(queries, k, exclude, fetch)

    def with_lexical(self, *, pairs: bool = False) -> bool:
        """Read the store's documents once (texts, ids and metadata, no vectors) and index them for BM25 (with word
        pairs if `pairs`); False for a store qrag cannot read (its hops then rank by Q alone). Built under the store's
        writer lock: two first searches read the store once, and an add racing them is indexed once."""
        if self.text_index is not None and (self.text_index.pairs or not pairs):
            return True
        with writer_lock(self.store):
            if self.text_index is None or (pairs and not self.text_index.pairs):
                pages = document_pages(self.store)
                if pages is None:
                    return False
                index: StoreLexical | None = None
                for docs in pages:  # a page indexed, then dropped: the peak holds the index and one page
                    chunks = [self._chunk(d) for d in docs]
                    ids, texts, metas = [c.id for c in chunks], [c.text for c in chunks], [c.metadata for c in chunks]
                    if index is None:
                        index = StoreLexical(ids, texts, metas, pairs=pairs)
                    else:
                        index.added(ids, texts, metas)
                self.text_index = index or StoreLexical([], [], [], pairs=pairs)
        return True

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """Hold the store for reading (`store_writes.StoreLock`): a search enters it from its first hop to its last,
        so qrag's writes over this store never land in the middle of one."""
        return writer_lock(self.store).reading()

    def memory(self) -> dict[str, int]:
        """Bytes qrag holds beside the store: its BM25 index of the documents (`StoreLexical.memory`; zeros before
        one is built). The vectors stay in the store."""
        if self.text_index is None:
            return {"lexical": 0, "ids": 0, "metadata": 0}
        return self.text_index.memory()

    def lexical_search(self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]], where: Filter | None,
                       *, texts: Sequence[str], questions: Sequence[str], weight: float,
                       pair_weight: float) -> list[list[Hybrid]]:
        """Per query row: the `k` best (chunk, Q-value, Q + `weight` · lexical evidence of `texts[r]`), exactly as an
        in-process index ranks them (`store_lexical.StoreLexical.search`; a chunk BM25 holds that the store lost is
        looked up by id and dropped; the few that could still reach the top, scored from their stored vectors)."""
        assert self.text_index is not None, "with_lexical() first"
        return self.text_index.search(lambda q, n, skip, w: self.search(q, n, skip, w), queries, k, exclude, where,
                                      texts, questions, weight, pair_weight, held=self._held,
                                      lookup=self._lookup if langchain_store_kind(self.store) in READABLE else None)

    def _lookup(self, ids: Sequence[str]) -> list[tuple[Chunk, Sequence[float]]]:
        """Those of `ids` the store holds, as chunks with their stored vectors (`documents_by_id`)."""
        return [(self._chunk(doc), vector) for doc, vector in documents_by_id(self.store, ids) or []]

    def _held(self, ids: Sequence[str]) -> set[str]:
        """Which of `ids` the store holds; all of them for a store that cannot look ids up (nothing is dropped)."""
        try:
            return stored_ids(self.store, ids)
        except ValueError:
            return set(ids)

    def _filter_args(self, where: Filter) -> dict[str, Any]:
        """The store search's keyword arguments for `where`. LangChain's FAISS filters only the `fetch_k` best
        candidates (20 by default), so a filtered search there fetches every stored vector: exact, at the cost of a
        full scan (a flat FAISS index scans them all anyway)."""
        kind = langchain_store_kind(self.store)
        if kind in ("chroma", "qdrant"):
            check_store_can_mean(kind, where, self._value_shapes(), store_name(self.store))
        args: dict[str, Any] = {"filter": store_filter(self.store, where)}
        if langchain_store_kind(self.store) == "faiss":
            args["fetch_k"] = max(1, int(self.store.index.ntotal))  # type: ignore[attr-defined]
        return args

    def _value_shapes(self) -> dict[str, set[str]]:
        """Which metadata keys of the stored documents hold lists or dicts (`store_filters.ValueShapes`)."""
        return self._shapes.current(None if self.text_index is None else self.text_index.version,
                                    lambda: ([d.metadata or {} for d in docs] for docs in document_pages(self.store) or ()))

    # ------------------------------------------------------------------ a living store
    def add_texts(self, texts: list[str], metadatas: list[dict[str, Any]], ids: Sequence[str] | None) -> list[str]:
        """Add checked texts to the store under `ids` (default: new random ids); returns the ids.

        The check and the add hold the store's writer lock (`store_writes.writer_lock`, one per store object, shared
        by every qrag retriever over it), so two adds of one id in this process give one add and one refusal.
        Writers in other processes are not covered: the database must enforce unique ids itself.

        Raises:
            ValueError: an id the store already holds (named; nothing is added: stores differ, Chroma would
                overwrite it, so qrag refuses as its own index does), or a store that cannot look ids up.
        """
        new_ids = check_ids([uuid.uuid4().hex for _ in texts] if ids is None else ids, len(texts))
        with writer_lock(self.store):
            refuse_held(new_ids, lambda ids: stored_ids(self.store, ids), f"this {type(self.store).__name__} store",
                        "add the texts under new ids")
            added = list(self.store.add_texts(texts, metadatas, ids=new_ids))
            self._added_lexical(texts, metadatas, added)
            self._shapes.took([m or {} for m in metadatas])
        return added

    def _added_lexical(self, texts: list[str], metadatas: list[dict[str, Any]], added: list[str]) -> None:
        """Keep the BM25 index of the store's documents in step with an add."""
        if self.text_index is not None:
            qdrant = langchain_store_kind(self.store) == "qdrant"  # its search names a point by metadata `_id`
            chunks = [self._chunk(Document(page_content=t, metadata={**(m or {}), "_id": uuid_form(i)} if qdrant
                                           else dict(m or {}), id=None if qdrant else i))
                      for t, m, i in zip(texts, metadatas, added, strict=True)]
            self.text_index.added([c.id for c in chunks], [c.text for c in chunks], [c.metadata for c in chunks])

    def delete(self, ids: list[str]) -> None:
        """Delete these ids from the store, the check and the delete under the store's writer lock (as `add_texts`).

        Raises:
            ValueError: an id the store does not hold (named; nothing is deleted: Chroma and Qdrant would ignore
                it), a deletion that would empty the store, or a store that cannot look ids up.
        """
        def delete() -> None:
            self.store.delete(ids=ids)
            if self.text_index is not None:
                self.text_index.deleted(set(ids) | {uuid_form(i) for i in ids})

        checked_delete(self.store, ids, lambda asked: stored_ids(self.store, asked), lambda: store_size(self.store),
                       delete, f"this {type(self.store).__name__} store", "document")

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
