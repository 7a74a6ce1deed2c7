"""qrag over the vector store a user already has: collections filled with all-MiniLM-L6-v2 the way tutorials fill them
(Chroma's default l2, in-process and through a server; InMemoryVectorStore's cosine; Qdrant COSINE; FAISS's L2;
LlamaIndex over such a Chroma collection) return what `from_texts` returns over the same texts, Q-values and the
BM25 evidence of the shipped paragraph model included; a store another encoder filled is refused before any query."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
import torch
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from qrag.eval.existing_collections import MiniLMEmbeddings
from qrag.integrations import MetricError, QRAGLlamaIndexRetriever, QRAGRetriever
from qrag.training.model.qnet import QNetwork
from qrag.training.search import load_model
from qrag.training.search.searcher import LexicalFallbackWarning

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
MODEL = "qrag/hotpotqa-minilm"  # its chunk tower is the untrained, normalised all-MiniLM-L6-v2
TEXTS = [
    "Paris is the capital and most populous city of France.",
    "The Eiffel Tower was built for the 1889 World's Fair in Paris.",
    "Gustave Eiffel's engineering company designed and built the tower.",
    "Berlin is the capital of Germany and its largest city.",
    "The Brandenburg Gate is an 18th-century monument in Berlin.",
    "Mount Everest is Earth's highest mountain above sea level.",
    "Tenzing Norgay and Edmund Hillary made the first ascent of Everest in 1953.",
    "Edmund Hillary was a mountaineer and beekeeper from New Zealand.",
    "The Louvre in Paris is the world's most visited museum.",
    "Leonardo da Vinci painted the Mona Lisa in the early sixteenth century.",
    "The Mona Lisa has hung in the Louvre since the French Revolution.",
    "Auckland is the largest city of New Zealand.",
]
IDS = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"doc-{i}")) for i in range(len(TEXTS))]  # Qdrant takes UUIDs
QUESTIONS = ["Who designed the tower built for the 1889 fair?", "Which beekeeper first climbed the highest mountain?",
             "In which museum does Leonardo's most famous painting hang?"]


@pytest.fixture(scope="module")
def embeddings() -> MiniLMEmbeddings:
    return MiniLMEmbeddings()


@pytest.fixture(scope="module")
def qnet() -> QNetwork:
    return load_model(MODEL)


@pytest.fixture(scope="module")
def exact(qnet: QNetwork) -> QRAGRetriever:
    return QRAGRetriever.from_texts(TEXTS, qnet, ids=IDS)


def _chroma(embeddings: Embeddings, **client: Any) -> Any:
    chromadb = pytest.importorskip("chromadb")
    from langchain_chroma import Chroma

    made = chromadb.HttpClient(**client) if client else chromadb.EphemeralClient()
    return Chroma.from_texts(TEXTS, embeddings, ids=IDS, client=made, collection_name=f"c-{uuid.uuid4().hex[:10]}")


def _qdrant(embeddings: Embeddings) -> Any:
    pytest.importorskip("qdrant_client")
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client.http.models import Distance

    return QdrantVectorStore.from_texts(TEXTS, embeddings, ids=IDS, location=":memory:",
                                        collection_name=f"q-{uuid.uuid4().hex[:10]}", distance=Distance.COSINE)


def _faiss(embeddings: Embeddings) -> Any:
    pytest.importorskip("faiss")
    from langchain_community.vectorstores import FAISS

    return FAISS.from_texts(TEXTS, embeddings, ids=IDS)


def _in_memory(embeddings: Embeddings) -> Any:
    store = InMemoryVectorStore(embeddings)
    store.add_texts(TEXTS, ids=IDS)
    return store


MAKERS = {"chroma_l2": _chroma, "in_memory_cosine": _in_memory, "qdrant_cosine": _qdrant, "faiss_l2": _faiss}


def _same(expected: list[Any], got: list[Any]) -> None:
    assert [d.id for d in got] == [d.id for d in expected]
    for key in ("q_value", "score"):
        assert [d.metadata[key] for d in got] == pytest.approx([d.metadata[key] for d in expected], abs=1e-4)
    assert [d.metadata["past_stop"] for d in got] == [d.metadata["past_stop"] for d in expected]


def test_an_in_memory_minilm_store_gives_what_from_texts_gives_and_another_encoder_is_refused(
        embeddings: Embeddings, qnet: QNetwork, exact: QRAGRetriever) -> None:
    """The default suite's share: one cosine store of 12 passages, the shipped paragraph model with its BM25."""
    retriever = QRAGRetriever.from_vector_store(_in_memory(embeddings), qnet)
    for q in QUESTIONS:
        _same(exact.invoke(q), retriever.invoke(q))
    with pytest.raises(MetricError, match="another encoder"):
        QRAGRetriever.from_vector_store(_in_memory(DeterministicFakeEmbedding(size=384)), qnet)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_minilm_collection_gives_what_from_texts_gives(kind: str, embeddings: Embeddings, qnet: QNetwork,
                                                         exact: QRAGRetriever) -> None:
    retriever = QRAGRetriever.from_vector_store(MAKERS[kind](embeddings), qnet)
    for opts in ({}, {"k": None}, {"k": 3, "lexical_weight": 0.0}, {"k": 5, "score_threshold": 0.3}):
        for q in QUESTIONS:
            _same(exact.invoke(q, **opts), retriever.invoke(q, **opts))


@pytest.mark.slow
def test_through_a_chroma_server(server: tuple[int, Any], embeddings: Embeddings,  # noqa: F811 (the fixture)
                                 qnet: QNetwork, exact: QRAGRetriever) -> None:
    retriever = QRAGRetriever.from_vector_store(_chroma(embeddings, host="127.0.0.1", port=server[0]), qnet)
    for q in QUESTIONS:
        _same(exact.invoke(q), retriever.invoke(q))


@pytest.mark.slow
def test_llama_index_over_a_default_chroma_collection(embeddings: Embeddings, qnet: QNetwork) -> None:
    pytest.importorskip("llama_index.vector_stores.chroma")
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.chroma import ChromaVectorStore

    store = _chroma(embeddings)
    nodes = [TextNode(text=t, id_=i) for t, i in zip(TEXTS, IDS, strict=True)]
    exact = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=qnet, similarity_top_k=4)
    over = QRAGLlamaIndexRetriever.from_vector_store(ChromaVectorStore(chroma_collection=store._collection), qnet,
                                                     similarity_top_k=4)
    for q in QUESTIONS:
        a, b = exact.retrieve(q), over.retrieve(q)
        assert [n.node.node_id for n in b] == [n.node.node_id for n in a]
        assert [n.score for n in b] == pytest.approx([n.score for n in a], abs=1e-4)
        assert [n.node.metadata["q_value"] for n in b] == pytest.approx([n.node.metadata["q_value"] for n in a], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_collection_another_encoder_filled_is_refused_before_any_query(kind: str, qnet: QNetwork) -> None:
    store = MAKERS[kind](DeterministicFakeEmbedding(size=384))
    with pytest.raises(MetricError, match="another encoder"):
        QRAGRetriever.from_vector_store(store, qnet)


@pytest.mark.slow
def test_a_store_that_does_not_say_its_metric_is_probed(embeddings: Embeddings, qnet: QNetwork,
                                                        exact: QRAGRetriever) -> None:
    class MyStore(VectorStore):  # a store qrag does not know (a subclass of a known one is read as that one)
        def __init__(self, embedding: Embeddings) -> None:
            self.inner = InMemoryVectorStore(embedding)

        def add_texts(self, texts: Any, metadatas: Any = None, **kwargs: Any) -> list[str]:
            return self.inner.add_texts(texts, metadatas, **kwargs)

        def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> Any:
            return self.inner.similarity_search(query, k, **kwargs)

        def similarity_search_with_score_by_vector(self, embedding: Any, k: int = 4, **kwargs: Any) -> Any:
            return self.inner.similarity_search_with_score_by_vector(embedding, k, **kwargs)

        @classmethod
        def from_texts(cls, texts: Any, embedding: Any, metadatas: Any = None, **kwargs: Any) -> Any:
            raise NotImplementedError

    store = MyStore(embeddings)
    store.add_texts(TEXTS, ids=IDS)
    with pytest.warns(LexicalFallbackWarning):  # qrag cannot read a store it does not know: Q alone ranks
        retriever = QRAGRetriever.from_vector_store(store, qnet)
    assert retriever.searcher.store.score_map.convention == "cosine"  # type: ignore[union-attr]
    _same(exact.invoke(QUESTIONS[0], lexical_weight=0.0), retriever.invoke(QUESTIONS[0]))
    fake = MyStore(DeterministicFakeEmbedding(size=384))
    fake.add_texts(TEXTS, ids=IDS)
    with pytest.raises(MetricError, match="another encoder|none of what"):
        QRAGRetriever.from_vector_store(fake, qnet)


def test_chunk_towers_that_cannot_read_a_cosine_store_are_refused_by_name(tiny_encoder_path: Any) -> None:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    store.add_texts(TEXTS[:3])
    trained = QNetwork.from_encoder(str(tiny_encoder_path), normalize=True)
    with torch.no_grad():
        next(trained.chunk_tower.parameters()).add_(0.01)  # a chunk tower that training moved
    with pytest.raises(MetricError, match="ranks by 'cosine'.*chunk tower was trained"):
        QRAGRetriever.from_vector_store(store, trained)
    with pytest.raises(MetricError, match="ranks by 'cosine'.*not unit-norm"):
        QRAGRetriever.from_vector_store(store, QNetwork.from_encoder(str(tiny_encoder_path)))
    with pytest.raises(ValueError, match="position"):
        QRAGRetriever.from_vector_store(store, QNetwork.from_encoder(str(tiny_encoder_path), normalize=True,
                                                                      position_mode="relative"))


@pytest.mark.slow
def test_bm25_over_the_store_keeps_in_step_with_adds_and_deletes(embeddings: Embeddings, qnet: QNetwork) -> None:
    retriever = QRAGRetriever.from_vector_store(_in_memory(embeddings), qnet)
    more = ["The Mona Lisa was stolen from the Louvre in 1911 by Vincenzo Peruggia."]
    new_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "doc-new"))
    retriever.add_texts(more, ids=[new_id])
    retriever.delete([IDS[9]])
    texts, ids = [*TEXTS[:9], *TEXTS[10:], *more], [*IDS[:9], *IDS[10:], new_id]
    exact = QRAGRetriever.from_texts(texts, qnet, ids=ids)
    for q in [*QUESTIONS, "Who stole the painting from the Louvre?"]:
        _same(exact.invoke(q), retriever.invoke(q))


from tests.qrag_integrations.test_vector_db_server import server  # noqa: E402,F401  (the Chroma server fixture)
