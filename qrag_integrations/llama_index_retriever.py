"""`QRAGLlamaIndexRetriever`: qrag's multi-hop search as a LlamaIndex retriever (no LLM call per hop)."""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores.types import FilterCondition, MetadataFilters

from qrag.integrations.llama_index_filters import from_metadata_filters
from qrag.integrations.llama_index_versions import NodesVersion, Shelf, shelf_for
from qrag.training.model import Precision, QNetwork, indexing_precision
from qrag.training.search import (
    FROM_MODEL,
    ChunkIndex,
    Fill,
    FromModel,
    LongChunks,
    MultiHopSearcher,
    SearchConfig,
    check_delete_ids,
    check_json_metadata,
    check_query,
    check_retriever_backend,
    check_trace_keys,
    load_model,
    recover_folder,
)

if TYPE_CHECKING:
    from qrag.integrations.llama_index_store import LlamaIndexChunkStore

TRACE_KEYS = ("hop", "q_value", "past_stop")
SEARCH_ARGS = ("max_hops", "stop_threshold", "beam_size", "order", "fill", "lexical_weight", "score_threshold")
SAVE_FILE = "retriever.json"
NODES_FILE = "docstore.json"
# LlamaIndex's `load_index_from_storage` reads this file first: its one entry names no index type LlamaIndex knows,
# so the attempt stops with this text (a KeyError) instead of a missing file.
INDEX_STORE_FILE = "index_store.json"
NOT_AN_INDEX = ("this folder holds a persisted QRAGLlamaIndexRetriever, not a LlamaIndex index (qrag's vectors come "
                "from its own chunk tower, which a VectorStoreIndex would not use for queries): load it with "
                "QRAGLlamaIndexRetriever.from_persist_dir(path)")
SAVE_FORMAT = "qrag-llama-index-retriever"
dispatcher = instrument.get_dispatcher(__name__)


class QRAGHopEvent(BaseEvent):
    """One hop of a qrag search: which node it took and with what Q-value."""

    query: str
    hop: int
    node_id: str
    q_value: float
    past_stop: bool

    @classmethod
    def class_name(cls) -> str:
        return "QRAGHopEvent"


class QRAGLlamaIndexRetriever(BaseRetriever):
    """Multi-hop retrieval with a trained qrag Q-network over LlamaIndex nodes.

    `similarity_top_k=2` (default, as LlamaIndex's retrievers) returns exactly `min(similarity_top_k, N)`
    nodes, those past the stop rule flagged `past_stop`; `similarity_top_k=None` opts in to adaptive search,
    where the model's stop rule chooses how many (at most `max_hops`; see `qrag.training.search.searcher`).
    `max_hops`, `stop_threshold`, `fill` and `lexical_weight` default to the values saved with the model (a model
    that weighs lexical evidence gets the BM25 index of the nodes built and persisted with the retriever). Nodes
    are embedded with `MetadataMode.EMBED` (their text plus the metadata not excluded from embedding), as
    LlamaIndex does. `NodeWithScore.score` is the score the node was ranked by (its Q-value, plus any lexical
    evidence); `hop`, `q_value` and `past_stop` go in node metadata, excluded from LLM and embedding text. Each
    hop emits a `QRAGHopEvent`.

    `filters` (LlamaIndex `MetadataFilters`: `==`, `!=`, `in`, `nin`, `>`, `>=`, `<`, `<=`, joined by `and` / `or`,
    nested) restricts every hop to the nodes it allows, and the rest of `similarity_top_k` comes from inside it,
    so fewer come back when fewer match; over a vector store the filters go to the store's own query. They are
    the retriever's floor: a copy taken at construction, which cannot be assigned (`with_floor(new)` makes another
    retriever over the same nodes; `persist` keeps it, and `from_persist_dir(path, filters=...)` narrows it). Returned nodes are copies: editing one changes nothing held.
    `score_threshold` drops the nodes whose score is below it (possibly all). Nodes come in hop order (or document
    order), not score order. `insert_nodes` and `delete_nodes` change the node set without a rebuild, and publish
    the index and its nodes as one version: a retrieval (its hits and node bodies) and a `persist` read one.

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(["Mary took the milk.", "John is home."])]
        >>> retriever = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model="all-MiniLM-L6-v2", similarity_top_k=1)
        >>> [n.node.node_id for n in retriever.retrieve("Where is the milk?")]  # doctest: +SKIP
        ['n0']
    """

    def __init__(
        self,
        searcher: MultiHopSearcher,
        nodes: Sequence[BaseNode],
        similarity_top_k: int | None = 2,
        max_hops: int | None = None,
        stop_threshold: float | FromModel | None = FROM_MODEL,
        beam_size: int = 1,
        order: Literal["hop", "document"] = "hop",
        fill: Fill | FromModel = FROM_MODEL,
        lexical_weight: float | FromModel = FROM_MODEL,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        filters: MetadataFilters | None = None,
        score_threshold: float | None = None,
    ) -> None:
        index = searcher.index
        if index is None and nodes:
            raise ValueError("a searcher over an external store takes no nodes= (they come from the store).")
        if index is not None and index.ids != [n.node_id for n in nodes]:
            raise ValueError("the searcher's ChunkIndex must hold exactly these nodes, by node_id and in order.")
        for n in nodes:
            check_trace_keys(n.metadata, TRACE_KEYS, f"node {n.node_id!r}")
        if index is not None:
            index.with_metadatas([n.metadata for n in nodes])  # what filters read (older saves kept none there)
        self.searcher = searcher
        # The versions of the index and its nodes, shared with every retriever over this index.
        self._shelf: Shelf | None = None if index is None else shelf_for(index, list(nodes))
        self.similarity_top_k, self.max_hops, self.stop_threshold = similarity_top_k, max_hops, stop_threshold
        self.beam_size, self.order, self.fill, self.lexical_weight = beam_size, order, fill, lexical_weight
        self.score_threshold = score_threshold
        self._filters = None if filters is None else filters.model_copy(deep=True)
        searcher.config.with_overrides(self._args())  # fail at construction on a bad argument
        self._where = from_metadata_filters(self._filters)  # a malformed filter is refused here, before any search
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def filters(self) -> MetadataFilters | None:
        """The floor every retrieval applies (a copy: editing it changes nothing)."""
        return None if self._filters is None else self._filters.model_copy(deep=True)

    @filters.setter
    def filters(self, value: MetadataFilters | None) -> None:
        raise AttributeError("a retriever's filters are its floor (a tenant's access) and cannot change on the live "
                             "object, where every thread's next retrieval would run under the new one; make another "
                             "retriever with retriever.with_floor(new_filters).")

    def with_floor(self, filters: MetadataFilters | None) -> QRAGLlamaIndexRetriever:
        """Another retriever over the same searcher and nodes (nothing copied; each sees the other's inserts and
        deletes) with `filters` as its floor in place of this one's (None: no floor); this retriever is unchanged."""
        where = from_metadata_filters(filters)  # a malformed filter is refused before anything is made
        other = copy.copy(self)
        other._filters = None if filters is None else filters.model_copy(deep=True)
        other._where = where
        return other

    @property
    def _version(self) -> NodesVersion | None:
        """The current version of the index and its nodes (None over an external store)."""
        return None if self._shelf is None else self._shelf.version

    @property
    def _nodes(self) -> dict[str, BaseNode]:
        """The current version's nodes by id."""
        return {} if self._shelf is None else self._shelf.version.by_id()

    def _args(self) -> dict[str, Any]:
        return {"k": self.similarity_top_k, "max_hops": self.max_hops, "stop_threshold": self.stop_threshold,
                "beam_size": self.beam_size, "order": self.order, "fill": self.fill,
                "lexical_weight": self.lexical_weight, "score_threshold": self.score_threshold}

    @classmethod
    def from_defaults(
        cls,
        nodes: Iterable[BaseNode] | None = None,
        documents: Sequence[Document] | None = None,
        model: QNetwork | str | Path | None = None,
        similarity_top_k: int | None = 2,
        node_parser: NodeParser | None = None,
        backend: Literal["torch"] = "torch",
        ordered: bool = False,
        precision: Precision = "auto",
        long_chunks: LongChunks = "windows",
        **kwargs: Any,
    ) -> QRAGLlamaIndexRetriever:
        """Index `nodes` (or `documents`, split by `node_parser` if given, else one node each) with the
        chunk tower of `model`: a `QNetwork`, a `save_pretrained` folder, or an encoder name (untrained).
        `ordered=True` declares the nodes one document in reading order (position-aware models need it);
        `precision='auto'` (the default) embeds the index in fp32 and, on a CPU, serves the state passes of every hop
        in whichever of fp32, int8 (ONNX Runtime's int8 graphs) and bf16 (where the CPU has native bf16 units:
        AVX512-BF16, AMX) a timed query runs clearly fastest in (`QNetwork.serve_in`), on a GPU in bf16 where it has
        native bf16; 'int8' serves in int8 as asked; 'bf16' also indexes in bf16, 'fp32' keeps every pass in fp32. Nodes longer than the model reads are
        searched by their best window (`long_chunks='windows'`), or read from their start ('cut'): docs/METHOD.md §4.6."""
        check_retriever_backend(backend, "QRAGLlamaIndexRetriever.from_defaults")
        if model is None:
            raise ValueError("from_defaults needs model=: a QNetwork, a checkpoint folder or an encoder name.")
        if (nodes is None) == (documents is None):
            raise ValueError("pass exactly one of nodes= or documents=.")
        if documents is not None:
            nodes = node_parser.get_nodes_from_documents(documents) if node_parser else documents
        assert nodes is not None
        nodes = list(nodes)  # read once: a generator works
        cls._check_args(similarity_top_k, kwargs)
        _check_nodes(nodes, "from_defaults")
        nodes = [n.model_copy(deep=True) for n in nodes]  # the retriever's own: the caller's later edits change nothing
        qnet = load_model(model, precision=precision)
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        index = ChunkIndex.from_texts(qnet, texts, [n.node_id for n in nodes], [n.metadata for n in nodes],
                                      ordered=ordered, precision=indexing_precision(precision),
                                      long_chunks=long_chunks)
        return cls(MultiHopSearcher(qnet, index), nodes, similarity_top_k, **kwargs)

    @classmethod
    def from_vector_store(
        cls, vector_store: Any, model: QNetwork | str | Path, similarity_top_k: int | None = 2, *,
        precision: Precision = "auto", **kwargs: Any
    ) -> QRAGLlamaIndexRetriever:
        """Hops against a LlamaIndex vector store (a database server) holding `QRAGLlamaIndexEmbedding` vectors
        under an inner-product metric, or, for a model whose chunk tower is the untrained normalised base encoder
        (`qrag/hotpotqa-minilm`), a cosine or L2 collection that encoder filled (e.g. `ChromaVectorStore` over a
        default Chroma collection of all-MiniLM-L6-v2 vectors): nothing is re-embedded, a few stored nodes are
        checked first (`LlamaIndexChunkStore`), and a model that weighs lexical evidence gets the BM25 index of the
        store's nodes (Chroma). Nodes come back from the store.

        Raises:
            MetricError (a ValueError): a cosine or L2 store this model cannot read Q-values from, or one another
                encoder filled (named: the norms or the cosine found)."""
        from qrag.integrations.llama_index_store import LlamaIndexChunkStore

        cls._check_args(similarity_top_k, kwargs)
        qnet = load_model(model, precision=precision)
        return cls(MultiHopSearcher(qnet, LlamaIndexChunkStore(vector_store, model=qnet)), [], similarity_top_k,
                   **kwargs)

    @classmethod
    def _check_args(cls, similarity_top_k: int | None, kwargs: dict[str, Any]) -> None:
        """Refuse a constructor argument the retriever would refuse, before anything is embedded."""
        names = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "searcher", "nodes")]
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(f"QRAGLlamaIndexRetriever got unknown argument(s) {unknown}; its arguments are {names}.")
        SearchConfig().with_overrides({"k": similarity_top_k, **{k: kwargs[k] for k in SEARCH_ARGS if k in kwargs}})
        from_metadata_filters(kwargs.get("filters"))

    def _store_node(self, node_id: str) -> BaseNode | None:
        """The node an external store returned for a hit (its metadata and settings whole, as `from_defaults` hands
        back its own); None in-process or when the store did not return it lately."""
        node = getattr(self.searcher.store, "node", None)
        return node(node_id) if callable(node) else None

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = check_query(query_bundle.query_str, "QRAGLlamaIndexRetriever")
        version, searcher = self._version, self.searcher
        if version is not None:  # search this version's index, whatever is inserted or deleted meanwhile
            searcher = copy.copy(searcher)
            searcher.store = version.index
        result = searcher.search_one(query, filter=self._where, **self._args())
        for h in sorted(result.hits, key=lambda h: h.hop):
            dispatcher.event(QRAGHopEvent(query=query, hop=h.hop, node_id=h.chunk.id, q_value=h.q_value,
                                          past_stop=h.past_stop))
        out = []
        for h in result.hits:
            stored = version.node(h.chunk) if version is not None else self._store_node(h.chunk.id)
            # The caller's own copy, nested metadata and relationships too: editing it changes nothing held.
            node = stored.model_copy(deep=True) if stored else TextNode(
                id_=h.chunk.id, text=h.chunk.text, metadata=copy.deepcopy(h.chunk.metadata))
            node.metadata = {**node.metadata, "hop": h.hop, "q_value": h.q_value, "past_stop": h.past_stop}
            node.excluded_llm_metadata_keys = _with_trace(node.excluded_llm_metadata_keys)
            node.excluded_embed_metadata_keys = _with_trace(node.excluded_embed_metadata_keys)
            out.append(NodeWithScore(node=node, score=h.score))
        return out

    # ------------------------------------------------------------------ a living node set
    def insert(self, document: Document, node_parser: NodeParser | None = None) -> None:
        """Insert one document (LlamaIndex's `BaseIndex.insert`): split by `node_parser` if given, else one node,
        as `from_defaults(documents=...)` does. `delete_ref_doc(document.doc_id)` removes it again."""
        if not isinstance(document, Document):
            raise ValueError(f"insert takes a LlamaIndex Document, got {type(document).__name__} ({document!r:.80}); "
                             "use insert_nodes for nodes.")
        self.insert_nodes(node_parser.get_nodes_from_documents([document]) if node_parser else [document])

    def insert_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Add nodes without a rebuild: only they are embedded (in the arithmetic the index was built in), and
        rankings then equal a retriever built from scratch on the whole set; `persist` keeps them. Over a vector
        store they are added to the store (with the vectors of its `QRAGLlamaIndexEmbedding`).

        Raises:
            ValueError: a node id that is already there, in-process or in the store (named; nothing is added),
                nodes that are not LlamaIndex nodes, or metadata a save could not write (checked before embedding).
        """
        if isinstance(nodes, BaseNode):
            raise ValueError(f"insert_nodes takes a list of nodes, got one node ({nodes.node_id!r}); pass [node].")
        nodes = list(nodes)
        _check_nodes(nodes, "insert_nodes")
        index = self.searcher.index
        if index is None:
            from qrag.integrations.llama_index_embeddings import QRAGLlamaIndexEmbedding

            self._chunk_store().add(nodes, QRAGLlamaIndexEmbedding(self.searcher.model).get_text_embedding_batch)
            return
        nodes = [n.model_copy(deep=True) for n in nodes]  # the retriever's own: the caller's later edits change nothing
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        shelf = self._shelf
        assert shelf is not None
        with shelf.writer:
            held = shelf.held(index)
            index.add(self.searcher.model, texts, [n.node_id for n in nodes], [n.metadata for n in nodes])
            count = len(held.index)
            del held.nodes[count:]  # items no published version reads (what a failed insert left)
            held.nodes.extend(nodes)
            shelf.publish(index, held.nodes, count)

    def delete_nodes(self, node_ids: Sequence[str], delete_from_docstore: bool = False) -> None:
        """Remove the nodes with these ids (over a vector store: from the store). `delete_from_docstore` is
        LlamaIndex's keyword; the retriever keeps no node outside its index, so a deleted node leaves what
        `persist` writes either way.

        Raises:
            ValueError: a single string (never read as its characters: pass `["12"]`), an id that is not there
                (named; nothing is deleted), or deleting every node.
        """
        node_ids = check_delete_ids(node_ids, "delete_nodes")
        if not isinstance(delete_from_docstore, bool):
            raise ValueError(f"delete_from_docstore must be True or False, got {delete_from_docstore!r}.")
        index = self.searcher.index
        if index is None:
            self._chunk_store().delete(node_ids)
            return
        shelf = self._shelf
        assert shelf is not None
        with shelf.writer:
            held = shelf.held(index)
            index.delete(node_ids)
            gone = set(node_ids)
            shelf.publish(index, [n for n in held.nodes[: len(held.index)] if n is None or n.node_id not in gone], 0)

    def delete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False) -> None:
        """Remove every node of the source document `ref_doc_id` (LlamaIndex's `BaseIndex.delete_ref_doc`): the
        nodes whose `ref_doc_id` it is, or the document itself where it was inserted as one node.

        Raises:
            ValueError: no node comes from `ref_doc_id` (named; nothing is deleted), or deleting every node.
        """
        if not isinstance(ref_doc_id, str):
            raise ValueError(f"delete_ref_doc takes one document id as a string, got {ref_doc_id!r:.80}.")
        if self.searcher.index is None:
            node_ids = self._chunk_store().ref_doc_node_ids(ref_doc_id)
        else:
            node_ids = [i for i, n in self._nodes.items() if _ref_doc_id(n) == ref_doc_id]  # the current version's
        if not node_ids:
            raise ValueError(f"no node of this retriever comes from document {ref_doc_id!r}; nothing was deleted.")
        self.delete_nodes(node_ids, delete_from_docstore=delete_from_docstore)

    def _chunk_store(self) -> LlamaIndexChunkStore:
        from qrag.integrations.llama_index_store import LlamaIndexChunkStore

        if not isinstance(self.searcher.store, LlamaIndexChunkStore):
            raise ValueError(f"this retriever searches a {type(self.searcher.store).__name__}, which qrag cannot "
                             "change; add to or delete from that store itself.")
        return self.searcher.store

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # The default would run the torch work on the event loop thread and block it.
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def persist(self, path: str | Path) -> Path:
        """Write the searcher (model + index), the nodes (a LlamaIndex `SimpleDocumentStore`) and every argument.

        Load it with `from_persist_dir`: LlamaIndex's `load_index_from_storage` refuses the folder with a message
        saying so (a `VectorStoreIndex` over these vectors would embed queries with another model).

        It writes one version, the index and its nodes together, whatever is inserted or deleted meanwhile, and
        replaces an earlier save at `path` only once the docstore it writes is checked to load beside that index.

        Raises:
            ValueError: an external store, metadata JSON cannot hold, or nodes that would not load beside the index
                (nothing is written; an earlier save at `path` is kept).
        """
        version = self._version
        if version is None:
            raise ValueError("a retriever over an external vector store has nothing of its own to persist; keep the "
                             "store and call from_vector_store again.")
        nodes = version.nodes[: len(version.index)]
        lacking = [i for i, n in zip(version.index.ids, nodes, strict=True) if n is None]
        if lacking:
            raise ValueError(f"cannot persist: the index holds ids {lacking[:5]} this retriever has no node for (was "
                             "retriever.searcher.index changed directly?); insert and delete through the retriever. "
                             "Nothing was written.")
        docstore = SimpleDocumentStore()
        docstore.add_documents([n for n in nodes if n is not None])
        filters = None if self._filters is None else self._filters.model_dump(mode="json")
        head = {"format": SAVE_FORMAT, "version": 1,
                "args": {**self._args(), "verbose": self._verbose, "filters": filters}}
        try:
            files = {NODES_FILE: json.dumps(docstore.to_dict()), SAVE_FILE: json.dumps(head, indent=2),
                     INDEX_STORE_FILE: json.dumps({"index_store/data": {"qrag": {"__type__": NOT_AN_INDEX,
                                                                                 "__data__": "{}"}}})}
        except (TypeError, ValueError) as e:
            raise ValueError(f"cannot persist: node metadata is not JSON-serialisable ({e}).") from None
        try:
            _nodes_from(json.loads(files[NODES_FILE]), version.index)  # what from_persist_dir will read
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"cannot persist: the docstore would not load beside the index ({type(e).__name__}: {e}); "
                             f"nothing was written, and an earlier save at {str(path)!r} is kept.") from None
        searcher = copy.copy(self.searcher)
        searcher.store = version.index
        return searcher.save(path, extra_files=files)  # one atomic write: model, index, nodes, arguments

    @classmethod
    def from_persist_dir(cls, path: str | Path, *, filters: MetadataFilters | None = None, device: str | None = None,
                         encoder: str | None = None) -> QRAGLlamaIndexRetriever:
        """Rebuild a retriever written by `persist` (no pickle). `filters` narrows the saved floor (a node must pass
        both; a saved floor is never lifted), or is the floor of a save without one.

        Raises:
            ValueError: the folder is not a complete save, or one of its files is corrupt (the message names
                the file; persist the retriever again). Nothing loads from a damaged file.
        """
        d = Path(path)
        recover_folder(d)  # a persist killed between its two renames: put the previous one back
        missing = [name for name in (SAVE_FILE, NODES_FILE) if not (d / name).is_file()]
        if missing:
            raise ValueError(f"{str(d)!r} is not a persisted QRAGLlamaIndexRetriever: {' and '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} missing; persist the retriever again.")
        try:
            head = json.loads((d / SAVE_FILE).read_text(encoding="utf-8"))
            if head.get("format") != SAVE_FORMAT:
                raise ValueError(f"format {head.get('format')!r}")
            args = dict(head["args"])
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:
            raise ValueError(f"{d / SAVE_FILE} is corrupt ({type(e).__name__}: {e}); persist the retriever again.") from None
        try:
            if args.get("filters") is not None:
                args["filters"] = MetadataFilters.model_validate(args["filters"])
        except ValueError as e:
            raise ValueError(f"{d / SAVE_FILE} holds filters LlamaIndex cannot read ({e}); persist the retriever "
                             "again.") from None
        if filters is not None:
            saved = args.get("filters")
            args["filters"] = filters if saved is None else MetadataFilters(filters=[saved, filters],
                                                                            condition=FilterCondition.AND)
        searcher = MultiHopSearcher.load(d, device=device, encoder=encoder)
        nodes = _read_nodes(d / NODES_FILE, searcher.index)  # type: ignore[arg-type]
        return cls(searcher, nodes, similarity_top_k=args.pop("k"), **args)


def _read_nodes(path: Path, index: ChunkIndex) -> list[BaseNode]:
    """The index's nodes from a docstore file `persist` wrote, each checked to be stored under its own id and to
    hold the text its vector was embedded from (an edited node would be served beside another text's vector)."""
    try:
        return _nodes_from(json.loads(path.read_text(encoding="utf-8")), index)
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:
        raise ValueError(f"{path} is corrupt ({type(e).__name__}: {e}); persist the retriever again.") from None


def _nodes_from(data: Any, index: ChunkIndex) -> list[BaseNode]:
    """The index's nodes from a docstore's JSON data, checked as `_read_nodes` says."""
    if not isinstance(data, dict):
        raise TypeError(f"a LlamaIndex docstore is a JSON object, this file holds a {type(data).__name__}")
    docstore = SimpleDocumentStore.from_dict(data)
    nodes = [docstore.get_node(i) for i in index.ids]
    for i, text, node in zip(index.ids, index.texts, nodes, strict=True):
        if node.node_id != i:
            raise ValueError(f"entry {i!r} holds node {node.node_id!r}")
        if node.get_content(metadata_mode=MetadataMode.EMBED) != text:
            raise ValueError(f"node {i!r} does not hold the text its vector in index/ was embedded from")
    return nodes


def _check_nodes(nodes: list[BaseNode], who: str) -> None:
    """Refuse what is not a node, a node whose metadata uses a trace key, or metadata a save could not write."""
    for n in nodes:
        if not isinstance(n, BaseNode):
            raise ValueError(f"{who} takes LlamaIndex nodes, got {type(n).__name__} ({n!r:.80}).")
        check_trace_keys(n.metadata, TRACE_KEYS, f"node {n.node_id!r}")
        check_json_metadata(n.metadata, f"node {n.node_id!r}'s metadata")


def _ref_doc_id(node: BaseNode) -> str | None:
    """The id of the document a node comes from: its source relationship, or its own id for a document used as
    one node."""
    return node.ref_doc_id if node.ref_doc_id is not None else node.node_id if isinstance(node, Document) else None


def _with_trace(keys: list[str]) -> list[str]:
    return [*keys, *(k for k in TRACE_KEYS if k not in keys)]
