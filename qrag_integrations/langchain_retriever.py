"""`QRAGRetriever`: qrag's multi-hop search as a LangChain `BaseRetriever` (no LLM call per hop)."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
    adispatch_custom_event,
    dispatch_custom_event,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langchain_core.runnables.utils import AnyConfigurableField
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, PrivateAttr, model_validator

from qrag.integrations.frozen_floor import frozen
from qrag.training.model import Precision, QNetwork, indexing_precision
from qrag.training.search import (
    FROM_MODEL,
    ChunkIndex,
    Fill,
    Filter,
    FromModel,
    LongChunks,
    MultiHopSearcher,
    SearchConfig,
    SearchResult,
    check_delete_ids,
    check_metadatas,
    check_query,
    check_retriever_backend,
    check_texts,
    check_trace_keys,
    load_model,
    recover_folder,
)

if TYPE_CHECKING:
    from qrag.integrations.langchain_embeddings import LangChainChunkStore

CALL_ARGS = ("k", "max_hops", "stop_threshold", "beam_size", "order", "fill", "lexical_weight", "score_threshold",
             "filter")
SEARCH_ARGS = CALL_ARGS[:-1]  # the `SearchConfig` fields; `filter` goes to the search beside them
TRACE_KEYS = ("score", "q_value", "hop", "past_stop")
SAVE_FILE = "retriever.json"
SAVE_FORMAT = "qrag-langchain-retriever"
# What a save records of a floor it cannot write (a function or a `Filter`): that there was one. Its `fields` hold a
# filter no loader accepts, so a qrag that predates the record refuses the save instead of loading it unfloored.
FUNCTION_FLOOR = "function"
_UNSAVED_FLOOR = {"$floor": "a function or Filter object: load with QRAGRetriever.load_local(folder, filter=...)"}
FloorSpec = dict[str, Any] | Callable[[Mapping[str, Any]], bool] | Filter | None


class _Batched(NamedTuple):
    """Results a `batch` call searched together, for the `invoke`s it then runs (one traced run each): taken only by
    the retriever that searched them, called with the arguments they were searched with (another retriever, with
    another floor, invoked inside the batch searches for itself)."""

    owner: object
    kwargs: dict[str, Any]
    found: dict[str, SearchResult]  # by query


_BATCHED: ContextVar[_Batched | None] = ContextVar("qrag_batched_results", default=None)


class QRAGRetriever(BaseRetriever):
    """Multi-hop retrieval with a trained qrag Q-network: each hop re-encodes question + chunks so far.

    `k=4` (default, as LangChain's retrievers) returns exactly `min(k, N)` documents, flagging those past the
    stop rule with `past_stop=True`; `k=None` opts in to adaptive search, where the model's stop rule chooses
    how many (at most `max_hops`; see `qrag.training.search.searcher`). `max_hops` and `stop_threshold` default to the
    values saved with the model (its trained horizon and calibrated threshold), as do `fill` (what ranks the
    documents past the hops: 'state', 'question', the off-domain guard, or 'question_unguarded') and
    `lexical_weight` (BM25 evidence beside the Q-value at every hop; `from_texts` builds the BM25 index such a
    model needs and `save_local` keeps it). Metadata gets `score` (what the document was ranked by: its Q-value,
    plus any lexical evidence), `q_value`, `hop` and `past_stop`; `Document.id` is the chunk id. Each hop is sent
    as a custom event `qrag_hop`.
    Per-call overrides: `invoke(query, k=..., max_hops=..., stop_threshold=..., beam_size=..., order=..., fill=...,
    lexical_weight=..., score_threshold=..., filter=...)`.

    `filter` (a field, or per call): which documents may be returned, `{key: value}` (every key must match; a list
    value: any of its items) or a function of the metadata dict returning a bool. The field's filter holds on every
    call (a tenant's floor); a per-call filter narrows it (both must allow a document) and `filter=None` adds
    nothing. The floor is fixed when the retriever is built (a copy of the dict): assigning `filter`,
    `model_copy(update={"filter": ...})` and `configurable_fields(filter=...)` are refused; `with_floor(new)` makes
    another retriever over the same searcher. Every hop takes only documents it allows and the rest of `k` comes
    from inside it, so fewer than `k` come back when fewer match (none for a key no document has). Over a vector
    store the dict goes to the database as its own filter (Chroma `where`, a Qdrant filter); a function needs
    `from_texts`. `score_threshold` drops the documents whose `score` is below it
    (possibly all). Documents come in hop order (`order='hop'`) or document order, not score order.
    `add_texts`, `add_documents` and `delete` change the documents without a rebuild (only what is added is
    embedded); adding an id that exists or deleting one that does not is refused, in-process and over a store
    alike; `save_local` keeps the changes. `search_kwargs={"k": 3, "filter": ...}` (LangChain's `as_retriever`
    spelling) is accepted by the constructors beside the fields themselves.

    Example:
        >>> retriever = QRAGRetriever.from_texts(
        ...     ["Mary went to the kitchen.", "Mary took the milk.", "John is in the garden."],
        ...     model="all-MiniLM-L6-v2", k=2)
        >>> [d.id for d in retriever.invoke("Where is the milk?")]  # doctest: +SKIP
        ['1', '0']
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    searcher: MultiHopSearcher
    k: int | None = 4
    max_hops: int | None = None
    stop_threshold: float | FromModel | None = FROM_MODEL
    beam_size: int = 1
    order: Literal["hop", "document"] = "hop"
    fill: Fill | FromModel = FROM_MODEL
    lexical_weight: float | FromModel = FROM_MODEL
    score_threshold: float | None = None
    filter: FloorSpec = None
    # The floor as every search applies it and as a save writes it (a dict's copy), both taken at construction.
    _floor: Filter | None = PrivateAttr(default=None)
    _floor_dict: dict[str, Any] | None = PrivateAttr(default=None)
    _floor_taken: bool = PrivateAttr(default=False)

    @model_validator(mode="before")
    @classmethod
    def _check_raw_args(cls, data: Any) -> Any:
        # Before pydantic coerces "3" or True to 3: the constructor is as strict as a per-call argument.
        return _check_search_fields(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _check_args(self) -> QRAGRetriever:
        self._search_args({})  # takes the floor
        return self

    def _taken_floor(self) -> Filter | None:
        """The floor, taken from `filter` once: at construction, or at the first search of a retriever pydantic built
        without validating it (`model_construct`). Later edits of the dict change neither the floor nor a save."""
        if not self._floor_taken:
            self._floor = Filter.coerce(self.filter)
            self._floor_dict = copy.deepcopy(self.filter) if isinstance(self.filter, dict) else None
            if self._floor_dict is not None:  # shown as enforced: a read-only copy (an in-place edit raises)
                super().__setattr__("filter", frozen(self._floor_dict))
            self._floor_taken = True
        return self._floor

    # ------------------------------------------------------------------ the floor
    def __setattr__(self, name: str, value: Any) -> None:
        if name == "filter":
            raise AttributeError("a retriever's filter is its floor (a tenant's access) and cannot change on the live "
                                 "object, where every thread's next call would run under the new one; make another "
                                 "retriever with retriever.with_floor(new_filter), or narrow one call with "
                                 "invoke(query, filter=...).")
        super().__setattr__(name, value)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> QRAGRetriever:
        """pydantic's `model_copy`, except that `update` cannot hold `filter` (the floor): use `with_floor`."""
        if update and "filter" in update:
            raise ValueError("model_copy(update={'filter': ...}) would replace the retriever's floor without a check; "
                             "use retriever.with_floor(new_filter), which builds a checked retriever.")
        return super().model_copy(update=update, deep=deep)

    def configurable_fields(self, **kwargs: AnyConfigurableField) -> RunnableSerializable[str, list[Document]]:
        """LangChain's `configurable_fields`, except for `filter`: a floor a call's config could replace is no
        floor (a call narrows it with `invoke(query, filter=...)`)."""
        if "filter" in kwargs:
            raise ValueError("filter is this retriever's floor and cannot be made configurable (a request's config "
                             "would replace it); pass a per-call filter=, which narrows the floor, or make one "
                             "retriever per floor with retriever.with_floor(new_filter).")
        return super().configurable_fields(**kwargs)

    def with_floor(self, filter: FloorSpec) -> QRAGRetriever:
        """Another retriever over the same searcher (nothing copied) with `filter` as its floor in place of this one's
        (None: no floor); every other field is kept, and this retriever is unchanged."""
        fields = {name: getattr(self, name) for name in type(self).model_fields if name not in ("searcher", "filter")}
        return type(self)(searcher=self.searcher, filter=filter, **fields)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        model: QNetwork | str | Path,
        metadatas: Iterable[dict[str, Any]] | None = None,
        ids: Iterable[str] | None = None,
        *,
        backend: Literal["torch"] = "torch",
        show_progress: bool | None = None,
        ordered: bool = False,
        precision: Precision = "auto",
        long_chunks: LongChunks = "windows",
        **kwargs: Any,
    ) -> QRAGRetriever:
        """Index `texts` (any iterable of strings, read once, as are `metadatas` and `ids`) with the chunk
        tower of `model` (a `QNetwork`, a `save_pretrained` folder, or an encoder name for an untrained model);
        `kwargs` are retriever fields (`k`, `max_hops`, ...).
        `ordered=True` declares the texts one document in reading order (position-aware models need it);
        `precision='auto'` (the default) embeds the index in fp32 and, on a CPU, serves the state passes of every hop
        in whichever of fp32, int8 (ONNX Runtime's int8 graphs) and bf16 (where the CPU has native bf16 units:
        AVX512-BF16, AMX) a timed query runs clearly fastest in (`QNetwork.serve_in`), on a GPU in bf16 where it has
        native bf16; 'int8' serves in int8 as asked; 'bf16' also indexes in bf16, 'fp32' keeps every pass in fp32.
        On a CPU, a model loaded by name or folder runs its fp32 passes
        through ONNX Runtime (`QNetwork.serve_engine`, `QRAG_CPU_ENGINE=torch` keeps torch). Texts longer than the model reads are
        searched by their best window (`long_chunks='windows'`), or read from their start ('cut'): docs/METHOD.md §4.6."""
        check_retriever_backend(backend, "QRAGRetriever.from_texts")
        kwargs = cls._constructor_fields(kwargs)  # a bad argument is refused before anything is embedded
        texts = check_texts(texts)
        metas = check_metadatas(metadatas, len(texts))
        for i, meta in enumerate(metas):
            check_trace_keys(meta, TRACE_KEYS, f"metadatas[{i}]")
        qnet = load_model(model, precision=precision)
        index = ChunkIndex.from_texts(qnet, texts, ids, metas, show_progress=show_progress,
                                      ordered=ordered, precision=indexing_precision(precision),
                                      long_chunks=long_chunks)
        return cls(searcher=MultiHopSearcher(qnet, index), **kwargs)

    @classmethod
    def from_documents(cls, documents: Sequence[Document], model: QNetwork | str | Path, *,
                       ids: Iterable[str] | None = None, **kwargs: Any) -> QRAGRetriever:
        """`from_texts` on the documents' contents, metadata and ids: explicit `ids` (one per document) win over
        each `Document.id`; without them a missing `Document.id` becomes the document's position."""
        if not isinstance(documents, Sequence) or not all(isinstance(d, Document) for d in documents):
            raise ValueError(f"documents must be a list of langchain Document objects, got {documents!r:.80}.")
        if ids is None:
            ids = [d.id if d.id is not None else str(i) for i, d in enumerate(documents)]
        return cls.from_texts([d.page_content for d in documents], model, [d.metadata for d in documents], ids, **kwargs)

    @classmethod
    def from_vector_store(
        cls, store: VectorStore, model: QNetwork | str | Path, *, id_key: str | None = None,
        precision: Precision = "auto", **kwargs: Any
    ) -> QRAGRetriever:
        """Hops against a vector store you already have: one holding `QRAGEmbeddings` vectors under a dot-product
        metric, or, for a model whose chunk tower is the untrained normalised base encoder (`qrag/hotpotqa-minilm`),
        a cosine or L2 collection that encoder filled (Chroma's default, `InMemoryVectorStore`, Qdrant COSINE, FAISS's
        default L2): nothing is re-embedded, each score is turned back into its exact Q-value. A few stored
        documents are checked first (`LangChainChunkStore`). A model that weighs lexical evidence gets the BM25
        index of the store's documents, read once (stores qrag can read: Chroma, Qdrant, FAISS, in-memory).

        Example:
            >>> store = Chroma.from_texts(texts, HuggingFaceEmbeddings(model_name="all-MiniLM-L6-v2"))  # doctest: +SKIP
            >>> retriever = QRAGRetriever.from_vector_store(store, "qrag/hotpotqa-minilm")  # doctest: +SKIP

        Raises:
            MetricError (a ValueError): a cosine or L2 store with a model whose chunk tower was trained or needs
                positions, or a store another encoder filled (named: the norms or the cosine found).
        """
        from qrag.integrations.langchain_embeddings import LangChainChunkStore

        kwargs = cls._constructor_fields(kwargs)
        qnet = load_model(model, precision=precision)
        return cls(searcher=MultiHopSearcher(qnet, LangChainChunkStore(store, model=qnet, id_key=id_key)), **kwargs)

    @classmethod
    def _constructor_fields(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A constructor's retriever fields (`search_kwargs` merged in), checked as the constructor will check them:
        `from_texts` refuses a bad one before it embeds anything."""
        fields = _with_search_kwargs(kwargs)
        unknown = sorted(set(fields) - set(cls.model_fields) | ({"searcher"} & set(fields)))
        if unknown:
            names = [f for f in cls.model_fields if f != "searcher"]
            raise ValueError(f"QRAGRetriever got unknown argument(s) {unknown}; its arguments are {names}.")
        return _check_search_fields(fields)

    # ------------------------------------------------------------------ retrieval
    def _search_args(self, call_kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(call_kwargs) - set(CALL_ARGS))
        if unknown:
            raise ValueError(f"QRAGRetriever got unknown argument(s) {unknown}; per-call arguments are {list(CALL_ARGS)}.")
        args = {name: call_kwargs.get(name, getattr(self, name)) for name in SEARCH_ARGS}
        self.searcher.config.with_overrides(args)  # validates k ≥ 1, ... with a message
        # The field's filter is a floor: a call's filter narrows it (None: nothing more), never replaces it. A
        # malformed filter is refused here, before any search.
        floor, narrower = self._taken_floor(), Filter.coerce(call_kwargs.get("filter"))
        args["filter"] = floor if narrower is None else narrower if floor is None else Filter((floor, narrower), "and")
        return args

    @staticmethod
    def _check_query(query: Any) -> str:
        return check_query(query, "QRAGRetriever")

    @staticmethod
    def _documents(result: SearchResult) -> list[Document]:
        docs = []
        for h in result.hits:
            check_trace_keys(h.chunk.metadata, TRACE_KEYS, f"chunk {h.chunk.id!r}")  # e.g. from an external store
            trace = {"score": h.score, "q_value": h.q_value, "hop": h.hop, "past_stop": h.past_stop}
            # The caller's own copy, nested lists too: editing it never reaches the index, its masks or its saves.
            metadata = {**copy.deepcopy(h.chunk.metadata), **trace}
            docs.append(Document(page_content=h.chunk.text, metadata=metadata, id=h.chunk.id))
        return docs

    @staticmethod
    def _events(result: SearchResult) -> list[dict[str, Any]]:
        hits = sorted(result.hits, key=lambda h: h.hop)
        return [{"query": result.question, "hop": h.hop, "id": h.chunk.id, "q_value": h.q_value,
                 "past_stop": h.past_stop} for h in hits]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        args, batched = self._search_args(kwargs), _BATCHED.get()
        mine = batched is not None and batched.owner is self and batched.kwargs == kwargs
        result = batched.found.get(query) if mine and batched is not None else None
        result = result or self.searcher.search_one(self._check_query(query), **args)
        for event in self._events(result):
            dispatch_custom_event("qrag_hop", event, config={"callbacks": run_manager.get_child()})
        return self._documents(result)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        args = self._search_args(kwargs)
        # Encoding is CPU/GPU-bound torch work: run it in a thread so the event loop keeps serving.
        result = await asyncio.to_thread(self.searcher.search_one, self._check_query(query), **args)
        for event in self._events(result):
            await adispatch_custom_event("qrag_hop", event, config={"callbacks": run_manager.get_child()})
        return self._documents(result)

    def batch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[list[Document]]:  # type: ignore[override]
        """One traced run per input (LangChain's own `batch`), but one batched search: every hop encodes the
        states of all questions together, and each run picks up its question's result."""
        found: dict[str, SearchResult] = {}
        queries = list(dict.fromkeys(q for q in inputs if isinstance(q, str) and q.strip()))
        try:
            if queries:
                found = dict(zip(queries, self.searcher.search(queries, **self._search_args(kwargs)), strict=True))
        except Exception:  # noqa: BLE001 - a bad argument or a store's error: each run raises it on its own, traced,
            found = {}  # as `invoke` would (so `return_exceptions=True` returns it in that run's place)
        token = _BATCHED.set(_Batched(self, dict(kwargs), found))
        try:
            return super().batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        finally:
            _BATCHED.reset(token)

    # ------------------------------------------------------------------ a living document set
    def add_texts(self, texts: Iterable[str], metadatas: Iterable[dict[str, Any]] | None = None,
                  ids: Iterable[str] | None = None) -> list[str]:
        """Add documents without a rebuild: only `texts` are embedded (in the arithmetic the index was built in);
        rankings then equal a retriever built from scratch on the whole set. Returns their ids (default: new
        random ids). Over a vector store they are added to the store (embedded by its `QRAGEmbeddings`).

        Raises:
            ValueError: an id that is already there (named), or malformed texts, metadata or ids.
        """
        texts = check_texts(texts)
        metas = check_metadatas(metadatas, len(texts))
        for i, meta in enumerate(metas):
            check_trace_keys(meta, TRACE_KEYS, f"metadatas[{i}]")
        index = self.searcher.index
        if index is None:
            return self._chunk_store().add_texts(texts, metas, None if ids is None else list(ids))
        return index.add(self.searcher.model, texts, ids, metas)

    def add_documents(self, documents: Sequence[Document], ids: Iterable[str] | None = None) -> list[str]:
        """`add_texts` of the documents' contents and metadata; returns their ids: explicit `ids` (one per document)
        win over each `Document.id`, and without them a missing `Document.id` becomes a new random id."""
        if not isinstance(documents, Sequence) or not all(isinstance(d, Document) for d in documents):
            raise ValueError(f"documents must be a list of langchain Document objects, got {documents!r:.80}.")
        if ids is None:
            ids = [d.id if d.id is not None else uuid.uuid4().hex for d in documents]
        return self.add_texts([d.page_content for d in documents], [d.metadata for d in documents], ids)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Remove the documents with these ids (over a vector store: from the store); LangChain's
        `VectorStore.delete` signature. Returns True (nothing was deleted if it raised).

        Raises:
            ValueError: `ids` None (never read as "every document") or a single string (never read as its
                characters: pass `["12"]`), an id that is not there (named; nothing is deleted), deleting every
                document, an option other than `ids`, or a store that cannot look ids up.
        """
        if kwargs:
            raise ValueError(f"QRAGRetriever.delete takes only ids, got {sorted(kwargs)}.")
        ids = check_delete_ids(ids, "QRAGRetriever.delete")
        index = self.searcher.index
        if index is None:
            self._chunk_store().delete(ids)
        else:
            index.delete(ids)
        return True

    def _chunk_store(self) -> LangChainChunkStore:
        from qrag.integrations.langchain_embeddings import LangChainChunkStore

        if not isinstance(self.searcher.store, LangChainChunkStore):
            raise ValueError(f"this retriever searches a {type(self.searcher.store).__name__}, which qrag cannot "
                             "change; add to or delete from that store itself.")
        return self.searcher.store

    # ------------------------------------------------------------------ persistence
    def save_local(self, folder: str | Path) -> Path:
        """Write the searcher (model + index, safetensors + JSON) and every retriever argument (JSON); the retriever
        itself is untouched. A dict floor (`filter`) is written and restored; a function or `Filter` floor cannot be
        written, so the save records that it had one (`"floor": "function"`) and `load_local` refuses it until the
        floor is given again (`load_local(folder, filter=...)`)."""
        fields = self.model_dump(exclude={"searcher", "filter"})
        self._taken_floor()
        if self.filter is None:
            floor, fields["filter"] = None, None
        elif self._floor_dict is not None:
            floor, fields["filter"] = "dict", self._floor_dict
        else:
            floor, fields["filter"] = FUNCTION_FLOOR, _UNSAVED_FLOOR
        try:
            blob = json.dumps({"format": SAVE_FORMAT, "version": 1, "floor": floor, "fields": fields})
        except TypeError as e:
            raise ValueError(f"cannot save: a retriever argument is not JSON-serialisable ({e}).") from None
        return self.searcher.save(folder, extra_files={SAVE_FILE: blob})  # one atomic write, model to fields

    @classmethod
    def load_local(cls, folder: str | Path, *, filter: FloorSpec = None, device: str | None = None,
                   encoder: str | None = None) -> QRAGRetriever:
        """Rebuild a retriever written by `save_local` (no pickle); `encoder` relocates a base encoder.

        Args:
            filter: The floor of a save made with a function or `Filter` floor (which a save cannot hold), given
                again. Over a save with a dict floor it narrows that floor (both must allow a document: a saved
                floor is never lifted); over a save without one it is the floor.

        Raises:
            ValueError: a save made with a function or `Filter` floor and no `filter=`, or a missing or corrupt save.
        """
        recover_folder(folder)  # a save killed between its two renames: put the previous one back
        head_path = Path(folder) / SAVE_FILE
        if not head_path.is_file():
            raise ValueError(f"{str(folder)!r} is not a saved QRAGRetriever: {SAVE_FILE} is missing (use save_local).")
        try:
            head = json.loads(head_path.read_text(encoding="utf-8"))
            if head.get("format") != SAVE_FORMAT:
                raise ValueError(f"format {head.get('format')!r}")
            fields = dict(head["fields"])
            floor = head.get("floor")  # None also in saves made before floors were recorded: a dict is in fields
            if floor not in (None, "dict", FUNCTION_FLOOR):
                raise ValueError(f"floor {floor!r}")
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:
            raise ValueError(f"{head_path} is corrupt ({type(e).__name__}: {e}); save the retriever again.") from None
        saved = fields.pop("filter", None)
        if floor == FUNCTION_FLOOR:
            if filter is None:
                raise ValueError(f"{str(folder)!r} was saved with a floor (filter) that is a function or a Filter "
                                 "object, which a save cannot hold; load it with the floor given again: "
                                 "QRAGRetriever.load_local(folder, filter=the_same_floor).")
            saved = None
        fields["filter"] = _narrowed(saved, filter)
        return cls(searcher=MultiHopSearcher.load(folder, device=device, encoder=encoder), **fields)


def _narrowed(saved: dict[str, Any] | None, given: FloorSpec) -> FloorSpec:
    """A saved dict floor narrowed by one given on load (a document must pass both); either alone as it is."""
    if saved is None or given is None:
        return given if saved is None else saved
    if isinstance(given, dict):
        return {"$and": [saved, given]}  # still a dict: the next save writes it
    narrower = Filter.coerce(given)
    return Filter((Filter.from_dict(saved), narrower), "and") if narrower is not None else saved


def _with_search_kwargs(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor arguments with LangChain's `as_retriever` spelling, `search_kwargs={"k": 3, "filter": ...}`,
    merged in: its keys that are qrag's per-call arguments are taken, the others refused by name."""
    out = dict(fields)
    extra = out.pop("search_kwargs", None)
    if extra is None:
        return out
    if not isinstance(extra, Mapping):
        raise ValueError(f"search_kwargs must be a dict such as {{'k': 3}}, got {type(extra).__name__}.")
    unknown = sorted(set(extra) - set(CALL_ARGS))
    if unknown:
        raise ValueError(f"search_kwargs {unknown} mean nothing to qrag (fetch_k and lambda_mult tune MMR, which qrag's "
                         f"hops replace); qrag takes {list(CALL_ARGS)}, in search_kwargs or as arguments (k=3).")
    twice = sorted(set(extra) & set(out))
    if twice:
        raise ValueError(f"{twice} given both as arguments and in search_kwargs; pass each once.")
    return {**out, **extra}


def _check_search_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments (`search_kwargs` merged in) with the search arguments and the filter checked, before
    pydantic coerces "3" or True to 3: the constructor is as strict as a per-call argument."""
    fields = _with_search_kwargs(fields)
    SearchConfig().with_overrides({k: fields[k] for k in SEARCH_ARGS if k in fields})
    Filter.coerce(fields.get("filter"))
    if isinstance(fields.get("filter"), Mapping):
        fields["filter"] = copy.deepcopy(dict(fields["filter"]))  # the retriever's own: the caller's edits change nothing
    return fields
