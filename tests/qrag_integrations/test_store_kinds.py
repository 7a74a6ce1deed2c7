"""Stores told apart by their classes, subclasses included, and one writer at a time per store object: a subclass of
Chroma (LangChain's, LlamaIndex's) holding documents without metadata is searched, read for BM25, added to and
deleted from as Chroma is; two threads adding one id through two retrievers over the same store get one add and one
refusal, where the store's own add would let both through and keep the last."""

from __future__ import annotations

import gc
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from qrag.eval.existing_collections import MiniLMEmbeddings
from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever, store_writes
from qrag.integrations.store_writes import writer_lock
from qrag.training.model.qnet import QNetwork
from qrag.training.search import load_model
from qrag.training.search.searcher import LexicalFallbackWarning

chromadb = pytest.importorskip("chromadb")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
TEXTS = [
    "Paris is the capital and most populous city of France.",
    "The Eiffel Tower was built for the 1889 World's Fair in Paris.",
    "Gustave Eiffel's engineering company designed and built the tower.",
    "Berlin is the capital of Germany and its largest city.",
    "Mount Everest is Earth's highest mountain above sea level.",
    "Tenzing Norgay and Edmund Hillary made the first ascent of Everest in 1953.",
    "Edmund Hillary was a mountaineer and beekeeper from New Zealand.",
    "The Mona Lisa has hung in the Louvre since the French Revolution.",
]
IDS = [f"doc-{i}" for i in range(len(TEXTS))]
QUESTIONS = ["Who designed the tower built for the 1889 fair?", "Which beekeeper first climbed the highest mountain?"]
MORE = ["Leonardo da Vinci painted the Mona Lisa in the early sixteenth century.",
        "The Louvre in Paris is the world's most visited museum."]


@pytest.fixture(scope="module")
def embeddings() -> MiniLMEmbeddings:
    return MiniLMEmbeddings()


@pytest.fixture(scope="module")
def qnet() -> QNetwork:
    return load_model("qrag/hotpotqa-minilm")  # weighs lexical evidence: a store it cannot read ranks by Q alone


def _collection(cls: Any, embeddings: MiniLMEmbeddings) -> Any:
    """A default (l2) collection of the texts, without metadata, as `cls.from_texts` fills it."""
    return cls.from_texts(TEXTS, embeddings, ids=IDS, client=chromadb.EphemeralClient(),
                          collection_name=f"c-{uuid.uuid4().hex[:10]}")


def _no_fallback(make: Callable[[], Any]) -> Any:
    """`make()`, with qrag's warning that it cannot read a store (and ranks by Q alone) as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", LexicalFallbackWarning)
        return make()


def test_a_chroma_subclass_without_metadata_is_searched_and_changed_as_chroma(
        embeddings: MiniLMEmbeddings, qnet: QNetwork) -> None:
    from langchain_chroma import Chroma

    class MyChroma(Chroma):
        pass

    plain = QRAGRetriever.from_vector_store(_collection(Chroma, embeddings), model=qnet)
    store = _collection(MyChroma, embeddings)
    mine = _no_fallback(lambda: QRAGRetriever.from_vector_store(store, model=qnet))
    for q in QUESTIONS:
        a, b = plain.invoke(q), mine.invoke(q)
        assert [d.id for d in b] == [d.id for d in a]
        assert [d.metadata["q_value"] for d in b] == pytest.approx([d.metadata["q_value"] for d in a], abs=1e-4)
    with pytest.raises(ValueError, match=r"\['doc-1'\] are already in this MyChroma store"):
        mine.add_texts([MORE[0]], ids=["doc-1"])
    assert store._collection.get(ids=["doc-1"], include=["documents"])["documents"] == [TEXTS[1]]
    assert mine.delete(["doc-2"]) is True and store._collection.count() == len(TEXTS) - 1
    with pytest.raises(ValueError, match=r"\['doc-2'\] are not in this MyChroma store"):
        mine.delete(["doc-2"])


def test_a_llama_index_chroma_subclass_is_searched_and_changed_as_chroma(
        embeddings: MiniLMEmbeddings, qnet: QNetwork) -> None:
    pytest.importorskip("llama_index.vector_stores.chroma")
    from langchain_chroma import Chroma
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.chroma import ChromaVectorStore

    class MyChromaVectorStore(ChromaVectorStore):
        pass

    collection = _collection(Chroma, embeddings)._collection
    plain = QRAGLlamaIndexRetriever.from_vector_store(ChromaVectorStore(chroma_collection=collection), qnet,
                                                      similarity_top_k=3)
    mine = _no_fallback(lambda: QRAGLlamaIndexRetriever.from_vector_store(
        MyChromaVectorStore(chroma_collection=collection), qnet, similarity_top_k=3))
    for q in QUESTIONS:
        a, b = plain.retrieve(q), mine.retrieve(q)
        assert [n.node.node_id for n in b] == [n.node.node_id for n in a]
        assert [n.node.metadata["q_value"] for n in b] == pytest.approx([n.node.metadata["q_value"] for n in a],
                                                                         abs=1e-4)
    with pytest.raises(ValueError, match=r"\['doc-1'\] are already in this MyChromaVectorStore"):
        mine.insert_nodes([TextNode(text=MORE[0], id_="doc-1")])
    mine.delete_nodes(["doc-2"])
    assert collection.count() == len(TEXTS) - 1


def _in_memory_kind(texts: list[str], ids: list[str]) -> Any:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    class MyInMemory(InMemoryVectorStore):
        pass

    store = MyInMemory(DeterministicFakeEmbedding(size=16))
    store.add_texts(texts, ids=ids)
    return store


def _faiss_kind(texts: list[str], ids: list[str]) -> Any:
    pytest.importorskip("faiss")
    from langchain_community.vectorstores import FAISS
    from langchain_core.embeddings import DeterministicFakeEmbedding

    class MyFAISS(FAISS):
        pass

    return MyFAISS.from_texts(texts, DeterministicFakeEmbedding(size=16), ids=ids)


def _qdrant_kind(texts: list[str], ids: list[str]) -> Any:
    pytest.importorskip("qdrant_client")
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client.http.models import Distance

    class MyQdrant(QdrantVectorStore):
        pass

    return MyQdrant.from_texts(texts, DeterministicFakeEmbedding(size=16), ids=ids, location=":memory:",
                               collection_name="kinds", distance=Distance.COSINE)


@pytest.mark.parametrize(("make", "kind", "convention", "size"), [
    (_in_memory_kind, "in-memory", "cosine", len(TEXTS)), (_faiss_kind, "faiss", "l2_squared", None),
    (_qdrant_kind, "qdrant", "cosine", len(TEXTS))], ids=["in_memory", "faiss", "qdrant"])
def test_a_subclass_of_a_known_langchain_store_is_read_as_that_store(make: Any, kind: str, convention: str,
                                                                    size: int | None) -> None:
    from qrag.integrations.langchain_stores import (
        langchain_vector_search,
        read_documents,
        store_size,
        stored_ids,
    )
    from qrag.integrations.store_filters import langchain_store_kind

    ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, i)) for i in IDS]  # Qdrant takes UUIDs
    store = make(TEXTS, ids)
    assert langchain_store_kind(store) == kind
    known = langchain_vector_search(store)[1]
    assert known is not None and known.convention == convention  # the store's metric, not a probe of its scores
    read = read_documents(store)
    assert read is not None and sorted(d.page_content for d in read[0]) == sorted(TEXTS)
    assert stored_ids(store, [ids[0], str(uuid.uuid4())]) == {ids[0]} and store_size(store) == size


def _race(add: Callable[[str], Any]) -> tuple[list[str], list[BaseException]]:
    """Two threads calling `add(text)` at once, one text each; the texts that were added, and what was raised."""
    start, added, raised = threading.Barrier(2), [], []

    def run(text: str) -> None:
        start.wait()
        try:
            add(text)
            added.append(text)
        except BaseException as e:  # noqa: BLE001 (collected for the test to judge)
            raised.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in MORE]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return added, raised


def test_two_adds_of_one_id_through_two_retrievers_over_one_store_add_it_once(
        embeddings: MiniLMEmbeddings, qnet: QNetwork, monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_chroma import Chroma

    store = _collection(Chroma, embeddings)
    embeddings.embed_documents(MORE)  # known beforehand: the race is over the check, not the encoder
    first, second = (QRAGRetriever.from_vector_store(store, model=qnet) for _ in range(2))
    store_add = store.add_texts

    def slow_add(*args: Any, **kwargs: Any) -> Any:  # the database is slow to answer: the other add checks meanwhile
        time.sleep(0.2)
        return store_add(*args, **kwargs)

    monkeypatch.setattr(store, "add_texts", slow_add)
    by = {MORE[0]: first, MORE[1]: second}
    added, raised = _race(lambda text: by[text].add_texts([text], ids=["new"]))
    assert len(added) == 1 and len(raised) == 1, (added, raised)
    assert isinstance(raised[0], ValueError) and "already in this Chroma store" in str(raised[0])
    assert store._collection.get(ids=["new"], include=["documents"])["documents"] == added


def test_two_inserts_of_one_node_id_into_one_llama_index_store_insert_it_once(
        embeddings: MiniLMEmbeddings, qnet: QNetwork, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_index.vector_stores.chroma")
    from langchain_chroma import Chroma
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.chroma import ChromaVectorStore

    collection = _collection(Chroma, embeddings)._collection
    store = ChromaVectorStore(chroma_collection=collection)
    first, second = (QRAGLlamaIndexRetriever.from_vector_store(store, qnet) for _ in range(2))
    store_add = ChromaVectorStore.add

    def slow_add(self: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return store_add(self, *args, **kwargs)

    monkeypatch.setattr(ChromaVectorStore, "add", slow_add)
    by = {MORE[0]: first, MORE[1]: second}
    added, raised = _race(lambda text: by[text].insert_nodes([TextNode(text=text, id_="new")]))
    assert len(added) == 1 and len(raised) == 1, (added, raised)
    assert isinstance(raised[0], ValueError) and "already in this ChromaVectorStore" in str(raised[0])
    assert collection.get(ids=["new"], include=["documents"])["documents"] == added


def test_the_writer_lock_is_one_per_store_object_and_goes_with_it() -> None:
    class Unhashable:  # as a LlamaIndex store (a pydantic model) is
        __hash__ = None  # type: ignore[assignment]

    a, b = Unhashable(), Unhashable()
    assert writer_lock(a) is writer_lock(a) and writer_lock(a) is not writer_lock(b)
    key = id(b)
    del b
    gc.collect()
    assert key not in store_writes._LOCKS  # a later object at that address never shares a dead store's lock
    assert writer_lock(a) is writer_lock(a)
