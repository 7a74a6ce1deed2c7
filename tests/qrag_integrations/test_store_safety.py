"""A store behind `from_vector_store` is as safe as the in-process index: a tenant floor and a per-call filter mean
on every accepted store what they mean in process; adds and deletes beside searches never raise and never let a
deleted id come back after its delete returned; BM25 over a store reads texts and ids only, is versioned, and a
document the store lost is looked up once instead of fetching the whole store, and the few chunks that could still
reach the top are scored from their stored vectors, so each hop asks the store once (every LangChain store, and
LlamaIndex's Chroma); an inner-product store another encoder filled is refused by name."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

import pytest
import torch
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from qrag.eval.existing_collections import MiniLMEmbeddings
from qrag.integrations import MetricError, QRAGRetriever
from qrag.integrations.store_lexical import MAX_ROUNDS, StoreLexical
from qrag.training.model.qnet import QNetwork
from qrag.training.search import load_model
from tests.qrag_integrations.test_existing_collections import IDS, QUESTIONS, TEXTS
from tests.qrag_integrations.test_reads_beside_writes import Churn

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
META = [{"tenant": "a" if i % 2 else "b", "year": 1900 + 10 * i, "tags": ["x", "y"] if i % 3 else ["z"]}
        for i in range(len(TEXTS))]
FILTERS: list[dict[str, Any]] = [{"year": {"$gte": 1950}}, {"tags": "z"}, {"year": {"$in": [1910, 1930, 1970]}}]


@pytest.fixture(scope="module")
def embeddings() -> MiniLMEmbeddings:
    return MiniLMEmbeddings()


@pytest.fixture(scope="module")
def qnet() -> QNetwork:
    return load_model("qrag/hotpotqa-minilm")


def _in_memory(embeddings: Embeddings, texts: list[str] = TEXTS, ids: list[str] = IDS,
               metas: list[dict[str, Any]] = META) -> InMemoryVectorStore:
    store = InMemoryVectorStore(embeddings)
    store.add_texts(texts, metadatas=metas, ids=ids)
    return store


def _chroma(embeddings: Embeddings, texts: list[str] = TEXTS, ids: list[str] = IDS,
            metas: list[dict[str, Any]] = META) -> Any:
    chromadb = pytest.importorskip("chromadb")
    from langchain_chroma import Chroma

    return Chroma.from_texts(texts, embeddings, metadatas=metas, ids=ids, client=chromadb.EphemeralClient(),
                             collection_name=f"c-{uuid.uuid4().hex[:10]}")


def _qdrant(embeddings: Embeddings, texts: list[str] = TEXTS, ids: list[str] = IDS,
            metas: list[dict[str, Any]] = META) -> Any:
    pytest.importorskip("qdrant_client")
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client.http.models import Distance

    return QdrantVectorStore.from_texts(texts, embeddings, metadatas=metas, ids=ids, location=":memory:",
                                        collection_name=f"q-{uuid.uuid4().hex[:10]}", distance=Distance.COSINE)


def _faiss(embeddings: Embeddings, texts: list[str] = TEXTS, ids: list[str] = IDS,
           metas: list[dict[str, Any]] = META) -> Any:
    pytest.importorskip("faiss")
    from langchain_community.vectorstores import FAISS

    return FAISS.from_texts(texts, embeddings, metadatas=metas, ids=ids)


# beside the facts, lists that share the questions' words (BM25 evidence, low Q) and unrelated notes: more documents
# than a hop's first search asks for, so a search without lookups by id asks again for four times more
_MANY_TEXTS = [*TEXTS, *(f"Word list {i}: tower, fair, designed, beekeeper, mountain, museum, painting, hang."
                         for i in range(30)), *(f"Recipe {i}: mix flour, water and salt, then bake." for i in range(30))]
MANY = (_MANY_TEXTS, [*IDS, *(str(uuid.uuid5(uuid.NAMESPACE_URL, f"more-{i}")) for i in range(60))],
        [{"n": i} for i in range(len(_MANY_TEXTS))])

MAKERS = {"in_memory": _in_memory, "chroma_l2": _chroma, "qdrant_cosine": _qdrant, "faiss_l2": _faiss}


def _ids(docs: list[Any]) -> list[str]:
    return [str(d.id) for d in docs]


def _floors_and_filters_mean_what_they_mean_in_process(store: Any, qnet: QNetwork) -> None:
    exact = QRAGRetriever.from_texts(TEXTS, qnet, ids=IDS, metadatas=META)
    over = QRAGRetriever.from_vector_store(store, qnet)
    floor = {"tenant": "a"}
    exact_a, over_a = exact.with_floor(floor), over.with_floor(floor)
    for q in QUESTIONS:
        got = over_a.invoke(q)
        assert _ids(got) == _ids(exact_a.invoke(q))
        assert got and all(d.metadata["tenant"] == "a" for d in got)
        for where in FILTERS:
            assert _ids(over_a.invoke(q, filter=where)) == _ids(exact_a.invoke(q, filter=where)), where
            assert _ids(over.invoke(q, filter=where)) == _ids(exact.invoke(q, filter=where)), where


def test_a_floor_and_a_filter_over_an_in_memory_store_mean_what_they_mean_in_process(
        embeddings: Embeddings, qnet: QNetwork) -> None:
    _floors_and_filters_mean_what_they_mean_in_process(_in_memory(embeddings), qnet)


def test_a_function_floor_over_an_in_memory_store_filters_in_the_process(embeddings: Embeddings,
                                                                          qnet: QNetwork) -> None:
    over = QRAGRetriever.from_vector_store(_in_memory(embeddings), qnet, filter=lambda m: m["year"] < 1950)
    exact = QRAGRetriever.from_texts(TEXTS, qnet, ids=IDS, metadatas=META, filter=lambda m: m["year"] < 1950)
    for q in QUESTIONS:
        assert _ids(over.invoke(q)) == _ids(exact.invoke(q))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["chroma_l2", "qdrant_cosine", "faiss_l2"])
def test_a_floor_and_a_filter_over_every_store_mean_what_they_mean_in_process(kind: str, embeddings: Embeddings,
                                                                              qnet: QNetwork) -> None:
    _floors_and_filters_mean_what_they_mean_in_process(MAKERS[kind](embeddings), qnet)


# ---------------------------------------------------------------------- writes beside reads
def _churn_beside_searches(store: Any, qnet: QNetwork, seconds: float) -> tuple[list[str], int]:
    """One thread adds and deletes through one retriever (`Churn`) while two search through another over the same
    store for `seconds`; returns the problems the searches saw (exceptions, an id returned after its delete
    returned) and how many searches ran. The writer's own errors fail the test when it stops."""
    writer = QRAGRetriever.from_vector_store(store, qnet)
    reader = QRAGRetriever.from_vector_store(store, qnet)
    problems: list[str] = []
    searches = 0
    stop = threading.Event()

    def add(cid: str, text: str, who: str) -> None:
        writer.add_texts([f"Edmund Hillary climbed a new peak above the Louvre. {text}"],
                         metadatas=[{"tenant": "a", "year": 2000, "tags": [who]}], ids=[cid])

    def search(n: int) -> None:
        nonlocal searches
        while not stop.is_set():
            started = time.monotonic()
            try:
                docs = reader.invoke(QUESTIONS[n % len(QUESTIONS)] + " Hillary peak", k=4)
            except Exception as e:  # noqa: BLE001 - reported
                problems.append(f"reader: {type(e).__name__}: {e}")
                return
            gone = churn.gone_before(started)
            problems.extend(f"{d.id} returned after its delete returned" for d in docs if d.id in gone)
            searches += 1
            n += 1

    with Churn(add, lambda cid: writer.delete([cid])) as churn:
        threads = [threading.Thread(target=search, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
    return problems, searches


@pytest.mark.slow  # the minute-long version below runs beside it in the slow suite
def test_adds_and_deletes_beside_searches_over_an_in_memory_store(embeddings: Embeddings, qnet: QNetwork) -> None:
    problems, searches = _churn_beside_searches(_in_memory(embeddings), qnet, seconds=8)
    assert problems == [] and searches > 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["in_memory", "chroma_l2"])
def test_a_minute_of_adds_and_deletes_beside_searches(kind: str, embeddings: Embeddings, qnet: QNetwork) -> None:
    problems, searches = _churn_beside_searches(MAKERS[kind](embeddings), qnet, seconds=60)
    assert problems == [] and searches > 0


def test_a_search_reads_one_bm25_version_while_writes_swap_in_new_ones() -> None:
    """Framework-free: an add and a delete make new versions; a version read before them is unchanged and whole."""
    index = StoreLexical(["a", "b", "c"], ["milk in the kitchen", "apple in the garden", "box in the hall"],
                         [{}, {}, {}], pairs=False)
    before = index.version
    index.added(["d"], ["milk in the garden"], [{"n": 1}])
    index.deleted({"a"})
    assert before.ids == ("a", "b", "c") and before.lexical is not None and len(before.lexical) == 3
    now = index.version
    assert now.ids == ("b", "c", "d") and dict(now.rows) == {"b": 0, "c": 1, "d": 2} and now.lexical is not None
    assert len(now.lexical) == 3 and now.metadatas[2] == {"n": 1}


# ---------------------------------------------------------------------- BM25's reads and a stale index
def test_bm25_over_a_store_reads_texts_and_ids_only(embeddings: Embeddings, qnet: QNetwork) -> None:
    chromadb = pytest.importorskip("chromadb")
    from langchain_chroma import Chroma

    store = Chroma.from_texts(TEXTS, embeddings, metadatas=META, ids=IDS, client=chromadb.EphemeralClient(),
                              collection_name=f"c-{uuid.uuid4().hex[:10]}")
    asked: list[tuple[int | None, list[str]]] = []
    get = store._collection.get

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append((kwargs.get("limit"), list(kwargs.get("include") or [])))
        return get(*args, **kwargs)

    store._collection.get = spy  # type: ignore[method-assign]
    retriever = QRAGRetriever.from_vector_store(store, qnet)
    assert retriever.searcher.store.text_index is not None  # type: ignore[union-attr]
    whole = [include for limit, include in asked if limit != 4]  # the 4 sampled documents are checked by vector
    assert whole and all("embeddings" not in include for include in whole)
    assert retriever.searcher.store.memory()["lexical"] > 0  # type: ignore[union-attr]


def test_a_document_deleted_past_this_retriever_is_looked_up_once_not_fetched_for(embeddings: Embeddings,
                                                                                   qnet: QNetwork) -> None:
    texts = [*TEXTS, *(f"Hillary and Norgay, note {i}: the ascent of Everest in 1953." for i in range(40))]
    ids = [*IDS, *(str(uuid.uuid5(uuid.NAMESPACE_URL, f"extra-{i}")) for i in range(40))]
    store = _in_memory(embeddings, texts, ids, [{} for _ in texts])
    calls: list[int] = []
    search = store.similarity_search_with_score_by_vector

    def counted(embedding: Any, k: int = 4, **kwargs: Any) -> Any:
        calls.append(k)
        return search(embedding, k, **kwargs)

    store.similarity_search_with_score_by_vector = counted  # type: ignore[method-assign]
    reader, writer = (QRAGRetriever.from_vector_store(store, qnet) for _ in range(2))
    calls.clear()
    question = "Who made the first ascent of Everest?"
    reader.invoke(question)
    before = list(calls)
    best = max(range(len(texts)), key=lambda i: "Everest" in texts[i] and "1953" in texts[i])
    writer.delete([ids[best]])  # through another retriever: the reader's BM25 still holds it
    calls.clear()
    docs = reader.invoke(question)
    assert ids[best] not in _ids(docs)
    assert len(calls) <= len(before) + 2 and max(calls) <= 4 * max(before)
    assert ids[best] not in reader.searcher.store.text_index.version.rows  # type: ignore[union-attr]
    # the search that found it gone read one BM25 version throughout (its first hop's ranking, kept for the fill, was
    # scored before the drop); the next one reads the version without it, as a retriever built now does
    assert _ids(reader.invoke(question)) == _ids(QRAGRetriever.from_vector_store(store, qnet).invoke(question))


def test_a_store_that_never_returns_a_document_bm25_holds_is_asked_a_bounded_number_of_times() -> None:
    from qrag.training.search import Chunk

    others = [f"b{i}" for i in range(400)]
    index = StoreLexical(["a", *others], ["milk milk milk", *("apple box" for _ in others)],
                         [{} for _ in range(401)], pairs=False)

    asked: list[int] = []

    def search(q: torch.Tensor, n: int, skip: Any, where: Any) -> list[list[Any]]:
        asked.append(n)  # always full pages of documents BM25 does not know, never 'a'
        return [[(Chunk(f"x{i}", "x", {}), 1.0 - i * 1e-3) for i in range(n)]]

    got = index.search(search, torch.zeros(1, 4), 2, [set()], None, ["milk"], ["milk"], weight=0.5, pair_weight=0.0,
                       held=lambda ids: set(ids))  # 'a' is held: the store's own filter hides it
    assert len(asked) == MAX_ROUNDS and len(got[0]) == 2


def test_a_chunk_the_store_did_not_return_is_scored_from_its_stored_vector_in_one_lookup() -> None:
    from qrag.training.search import Chunk

    others = [f"b{i}" for i in range(40)]
    index = StoreLexical(["a", *others], ["milk milk milk", *("apple box" for _ in others)],
                         [{} for _ in range(41)], pairs=False)
    state = torch.tensor([[1.0, 0.0]])
    asked: list[int] = []
    looked: list[list[str]] = []

    def search(q: torch.Tensor, n: int, skip: Any, where: Any) -> list[list[Any]]:
        asked.append(n)  # Q falls from 0.9 by 0.01 a rank; 'a' (Q 0.5) is never among them
        return [[(Chunk(f"b{i}", "apple box", {}), 0.9 - 0.01 * i) for i in range(min(n, 40))]]

    def lookup(ids: Any) -> list[tuple[Any, list[float]]]:
        looked.append(list(ids))
        return [(Chunk(i, "milk milk milk", {}), [0.5, 7.0]) for i in ids if i == "a"]

    got = index.search(search, state, 2, [set()], None, ["milk"], ["milk"], weight=0.5, pair_weight=0.0,
                       lookup=lookup)[0]
    assert asked == [12] and looked == [["a"]]  # one search, one lookup of the one chunk that could reach the top
    # 'a': Q = <(1, 0), (0.5, 7)> = 0.5 and BM25 evidence 1 (the only document with 'milk'): 0.5 + 0.5 · 1 = 1.0
    assert [(c.id, round(q, 6), round(h, 6)) for c, q, h in got] == [("a", 0.5, 1.0), ("b0", 0.9, 0.9)]


def test_a_chunk_the_store_lost_is_dropped_by_the_lookup_not_fetched_for() -> None:
    from qrag.training.search import Chunk

    others = [f"b{i}" for i in range(40)]
    index = StoreLexical(["a", *others], ["milk milk milk", *("apple box" for _ in others)],
                         [{} for _ in range(41)], pairs=False)
    asked: list[int] = []

    def search(q: torch.Tensor, n: int, skip: Any, where: Any) -> list[list[Any]]:
        asked.append(n)
        return [[(Chunk(f"b{i}", "apple box", {}), 0.9 - 0.01 * i) for i in range(min(n, 40))]]

    got = index.search(search, torch.tensor([[1.0, 0.0]]), 2, [set()], None, ["milk"], ["milk"], weight=0.5,
                       pair_weight=0.0, lookup=lambda ids: [])[0]
    assert asked == [12] and [c.id for c, _, _ in got] == ["b0", "b1"]
    assert "a" not in index.version.rows  # gone from the index: the next search does not look for it


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MAKERS))
def test_each_hop_over_every_store_is_one_search_and_ranks_as_in_process(kind: str, embeddings: Embeddings,
                                                                          qnet: QNetwork) -> None:
    texts, ids, metas = MANY
    store = MAKERS[kind](embeddings, texts, ids, metas)
    over = QRAGRetriever.from_vector_store(store, qnet)
    chunks = over.searcher.store  # type: ignore[union-attr]
    calls: list[int] = []
    search = chunks.vector_search

    def counted(vector: Any, k: int = 4, **kwargs: Any) -> Any:
        calls.append(k)
        return search(vector, k=k, **kwargs)

    chunks.vector_search = counted
    exact = QRAGRetriever.from_texts(texts, qnet, ids=ids, metadatas=metas)
    for q in QUESTIONS:
        calls.clear()
        a, b = exact.invoke(q), over.invoke(q)
        assert _ids(b) == _ids(a), q
        assert [d.metadata["q_value"] for d in b] == pytest.approx([d.metadata["q_value"] for d in a], abs=1e-4)
        # one search a hop (a later hop's over-fetches its taken ids), never one for four times more
        assert len(calls) <= qnet.hop_settings.max_hops and max(calls) < 4 * min(calls), (q, calls)
        for where in ({"n": {"$gte": 6}}, {"n": {"$in": [1, 2, 6, 7, 20, 21, 50]}}):  # a looked-up chunk obeys it
            assert _ids(over.invoke(q, filter=where)) == _ids(exact.invoke(q, filter=where)), (q, where)


@pytest.mark.slow
def test_each_hop_over_a_llama_index_chroma_store_is_one_query_and_ranks_as_from_defaults(qnet: QNetwork) -> None:
    chromadb = pytest.importorskip("chromadb")
    pytest.importorskip("llama_index.vector_stores.chroma")
    from llama_index.core.schema import MetadataMode, TextNode
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from qrag.integrations import QRAGLlamaIndexEmbedding, QRAGLlamaIndexRetriever

    texts, ids, metas = MANY
    nodes = [TextNode(text=t, id_=i, metadata=m) for t, i, m in zip(texts, ids, metas, strict=True)]
    vectors = QRAGLlamaIndexEmbedding(qnet).get_text_embedding_batch(
        [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    collection = chromadb.EphemeralClient().create_collection(f"li-{uuid.uuid4().hex[:10]}",
                                                              configuration={"hnsw": {"space": "ip"}})
    store = ChromaVectorStore(chroma_collection=collection)
    store.add([n.model_copy(update={"embedding": v}) for n, v in zip(nodes, vectors, strict=True)])
    exact = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=qnet, similarity_top_k=5)
    over = QRAGLlamaIndexRetriever.from_vector_store(store, qnet, similarity_top_k=5)
    asked: list[int] = []
    query = store.query

    def counted(q: Any, **kwargs: Any) -> Any:
        asked.append(q.similarity_top_k)
        return query(q, **kwargs)

    object.__setattr__(store, "query", counted)  # a pydantic model: no plain attribute assignment
    for q in QUESTIONS:
        asked.clear()
        a, b = exact.retrieve(q), over.retrieve(q)
        assert [n.node.node_id for n in b] == [n.node.node_id for n in a], q
        assert [n.node.metadata["q_value"] for n in b] == pytest.approx([n.node.metadata["q_value"] for n in a],
                                                                        abs=1e-4)
        assert len(asked) <= qnet.hop_settings.max_hops and max(asked) < 4 * min(asked), (q, asked)


# ---------------------------------------------------------------------- inner-product stores
def test_an_inner_product_store_another_encoder_filled_is_refused_by_name(qnet: QNetwork) -> None:
    chromadb = pytest.importorskip("chromadb")
    from langchain_chroma import Chroma

    class UnitFake(DeterministicFakeEmbedding):  # another 384-d encoder, unit-norm
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [(torch.tensor(v) / torch.tensor(v).norm()).tolist() for v in super().embed_documents(texts)]

    store = Chroma.from_texts(TEXTS, UnitFake(size=384), ids=IDS, client=chromadb.EphemeralClient(),
                              collection_name=f"ip-{uuid.uuid4().hex[:10]}",
                              collection_configuration={"hnsw": {"space": "ip"}})
    with pytest.raises(MetricError, match="another encoder"):
        QRAGRetriever.from_vector_store(store, qnet)


def test_an_inner_product_store_of_this_models_vectors_is_taken(embeddings: Embeddings, qnet: QNetwork) -> None:
    chromadb = pytest.importorskip("chromadb")
    from langchain_chroma import Chroma

    from qrag.integrations import QRAGEmbeddings

    exact = QRAGRetriever.from_texts(TEXTS, qnet, ids=IDS)
    for fill in (QRAGEmbeddings(qnet), embeddings):  # qrag's own vectors, and the base encoder's unit vectors
        store = Chroma.from_texts(TEXTS, fill, ids=IDS, client=chromadb.EphemeralClient(),
                                  collection_name=f"ip-{uuid.uuid4().hex[:10]}",
                                  collection_configuration={"hnsw": {"space": "ip"}})
        over = QRAGRetriever.from_vector_store(store, qnet)
        for q in QUESTIONS:
            a, b = exact.invoke(q), over.invoke(q)
            assert _ids(b) == _ids(a)
            assert [d.metadata["q_value"] for d in b] == pytest.approx([d.metadata["q_value"] for d in a], abs=1e-4)


# ---------------------------------------------------------------------- what a store would mean otherwise
def test_a_filter_a_store_would_mean_otherwise_on_the_values_it_holds_is_refused_by_name(tiny_qnet: QNetwork) -> None:
    """Chroma's orders and negations cannot look inside a list value, Qdrant cannot tell a dict from a string in a
    negation: over a store holding such values under the key, the filter is refused by name (never a different
    answer); on keys holding plain values the same operators go through."""
    from qrag.integrations import QRAGEmbeddings
    from qrag.training.search import FilterError

    chromadb = pytest.importorskip("chromadb")
    from langchain_chroma import Chroma

    metas = [{"tags": ["x", "y"] if i % 2 else ["z"], "year": 1900 + i} for i in range(len(TEXTS))]
    chroma = Chroma.from_texts(TEXTS, QRAGEmbeddings(tiny_qnet), metadatas=metas, ids=IDS,
                               client=chromadb.EphemeralClient(), collection_name=f"c-{uuid.uuid4().hex[:10]}",
                               collection_configuration={"hnsw": {"space": "ip"}})
    retriever = QRAGRetriever.from_vector_store(chroma, tiny_qnet, k=3)
    for where in ({"tags": {"$ne": "z"}}, {"tags": {"$nin": ["z"]}}, {"tags": {"$gt": "a"}}):
        with pytest.raises(FilterError, match="holds list values under 'tags'"):
            retriever.invoke(QUESTIONS[0], filter=where)
    assert retriever.invoke(QUESTIONS[0], filter={"tags": "z"})  # '==' looks inside lists there
    assert retriever.invoke(QUESTIONS[0], filter={"year": {"$ne": 1901}})

    pytest.importorskip("qdrant_client")
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client.http.models import Distance

    metas = [{"kind": {"a": 1} if i == 3 else "plain", "year": 1900 + i} for i in range(len(TEXTS))]
    qdrant = QdrantVectorStore.from_texts(TEXTS, QRAGEmbeddings(tiny_qnet), metadatas=metas, ids=IDS,
                                          location=":memory:", collection_name=f"q-{uuid.uuid4().hex[:10]}",
                                          distance=Distance.DOT)
    retriever = QRAGRetriever.from_vector_store(qdrant, tiny_qnet, k=3)
    with pytest.raises(FilterError, match="holds dict values under 'kind'"):
        retriever.invoke(QUESTIONS[0], filter={"kind": {"$ne": "other"}})
    assert retriever.invoke(QUESTIONS[0], filter={"kind": "plain"})
    retriever.add_texts(["Another note."], metadatas=[{"kind": "plain", "year": 3, "more": {"b": 2}}],
                        ids=[str(uuid.uuid5(uuid.NAMESPACE_URL, "more"))])
    with pytest.raises(FilterError, match="holds dict values under 'more'"):  # learnt from qrag's add
        retriever.invoke(QUESTIONS[0], filter={"more": {"$nin": ["x"]}})


def test_llama_index_over_a_chroma_collection_holding_lists_refuses_filters_on_them(tiny_qnet: QNetwork) -> None:
    """A Chroma collection LangChain filled with list metadata, searched through LlamaIndex's Chroma store (whose
    filters have no $contains): a condition on a list key is refused by name; other keys filter as before."""
    chromadb = pytest.importorskip("chromadb")
    pytest.importorskip("llama_index.vector_stores.chroma")
    from langchain_chroma import Chroma
    from llama_index.core.vector_stores import MetadataFilter, MetadataFilters
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from qrag.integrations import QRAGEmbeddings, QRAGLlamaIndexRetriever
    from qrag.training.search import FilterError

    metas = [{"tags": ["x", "y"] if i % 2 else ["z"], "year": 1900 + i} for i in range(len(TEXTS))]
    chroma = Chroma.from_texts(TEXTS, QRAGEmbeddings(tiny_qnet), metadatas=metas, ids=IDS,
                               client=chromadb.EphemeralClient(), collection_name=f"c-{uuid.uuid4().hex[:10]}",
                               collection_configuration={"hnsw": {"space": "ip"}})
    retriever = QRAGLlamaIndexRetriever.from_vector_store(ChromaVectorStore(chroma_collection=chroma._collection),
                                                          tiny_qnet, similarity_top_k=3)
    on_tags = MetadataFilters(filters=[MetadataFilter(key="tags", value="z")])
    with pytest.raises(FilterError, match="holds list values under 'tags'"):
        QRAGLlamaIndexRetriever.from_vector_store(ChromaVectorStore(chroma_collection=chroma._collection),
                                                  tiny_qnet, similarity_top_k=3, filters=on_tags).retrieve(QUESTIONS[0])
    assert retriever.retrieve(QUESTIONS[0])


# ---------------------------------------------------------------------- the store's lock
@pytest.mark.parametrize("steady", ["writer", "readers"])
def test_neither_readers_nor_writers_starve_under_the_others_steady_stream(steady: str) -> None:
    """A writer that writes back to back never locks searches out (a finished write lets the waiting readers in
    before the next), and searches back to back never lock a writer out (a waiting writer holds back new readers)."""
    from qrag.integrations.store_writes import StoreLock

    lock = StoreLock()
    done = threading.Event()
    deadline = time.monotonic() + 60  # a bound on the steady stream, never a timing asserted

    def stream() -> None:
        while not done.is_set() and time.monotonic() < deadline:
            with lock if steady == "writer" else lock.reading():
                time.sleep(0.001)  # a write (an add's embedding) or a search takes a while

    streams = [threading.Thread(target=stream) for _ in range(1 if steady == "writer" else 3)]
    for t in streams:
        t.start()
    for _ in range(20):  # the other side, twenty times
        if steady == "writer":
            with lock.reading():
                pass
        else:
            with lock:
                pass
    finished_in_time = time.monotonic() < deadline
    done.set()
    for t in streams:
        t.join()
    assert finished_in_time


def test_a_search_may_read_again_inside_but_never_write() -> None:
    from qrag.integrations.store_writes import StoreLock

    lock = StoreLock()
    with lock.reading(), lock.reading():  # a search inside a search
        with pytest.raises(RuntimeError, match="inside a search"):
            with lock:
                pass
    with lock:  # the lock is free again
        pass
