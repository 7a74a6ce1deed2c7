"""The scale-out path for real: multi-hop search through Qdrant (local mode, dot product) equals the
exact torch index; the embeddings adapters are the two towers."""

from __future__ import annotations

import uuid

import pytest
import torch
from langchain_core.vectorstores import InMemoryVectorStore

from qrag.integrations import (
    LangChainChunkStore,
    MetricError,
    QRAGEmbeddings,
    QRAGLlamaIndexEmbedding,
    QRAGRetriever,
)
from qrag.training.model.qnet import QNetwork
from qrag.training.search.filters import Condition, Filter, FilterError
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher, SearchError


def _ids(n: int) -> list[str]:
    # Qdrant accepts UUIDs (or integers) as point ids: use the same ones in both stores.
    return [str(uuid.uuid5(uuid.NAMESPACE_URL, f"chunk-{i}")) for i in range(n)]


@pytest.fixture(scope="module")
def qdrant_store(texts: list[str], adapter_qnet: QNetwork):  # type: ignore[no-untyped-def]
    pytest.importorskip("qdrant_client")
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client.http.models import Distance

    return QdrantVectorStore.from_texts(
        texts, QRAGEmbeddings(adapter_qnet), metadatas=[{"qrag_position": i} for i in range(len(texts))],
        ids=_ids(len(texts)), location=":memory:", collection_name="qrag-test", distance=Distance.DOT,
    )


@pytest.mark.parametrize("opts", [{"k": 4}, {"k": 3, "beam_size": 2}, {"k": None, "stop_threshold": 0.0},
                                  {"k": 5, "max_hops": 2, "order": "document"}])
def test_qdrant_multi_hop_equals_exact_index(
    opts: dict, qdrant_store, texts: list[str], questions: list[str], adapter_qnet: QNetwork  # type: ignore[no-untyped-def, type-arg]
) -> None:
    exact = MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, texts, _ids(len(texts))))
    remote = MultiHopSearcher(adapter_qnet, LangChainChunkStore(qdrant_store))
    for a, b in zip(exact.search(questions, **opts), remote.search(questions, **opts), strict=True):
        assert [h.chunk.id for h in a.hits] == [h.chunk.id for h in b.hits]
        assert [h.chunk.text for h in a.hits] == [h.chunk.text for h in b.hits]
        assert [h.chunk.position for h in a.hits] == [h.chunk.position for h in b.hits]
        assert [h.q_value for h in a.hits] == pytest.approx([h.q_value for h in b.hits], abs=1e-4)
        assert [h.past_stop for h in a.hits] == [h.past_stop for h in b.hits]


def test_retriever_from_vector_store(qdrant_store, questions: list[str], adapter_qnet: QNetwork) -> None:  # type: ignore[no-untyped-def]
    r = QRAGRetriever.from_vector_store(qdrant_store, adapter_qnet, k=3)
    docs = r.invoke(questions[0])
    assert len(docs) == 3 and len({d.id for d in docs}) == 3 and [d.metadata["hop"] for d in docs] == [0, 1, 2]
    with pytest.raises(ValueError, match="external store"):
        r.save_local("/tmp/qrag-never-written")


def test_external_store_errors(tiny_encoder_path, qdrant_store, adapter_qnet: QNetwork) -> None:  # type: ignore[no-untyped-def]
    relative = QNetwork.from_encoder(str(tiny_encoder_path), position_mode="relative")
    with pytest.raises(SearchError, match="position_mode='relative'.*external store"):
        MultiHopSearcher(relative, LangChainChunkStore(qdrant_store))
    # LangChain's in-memory store ranks by cosine: its scores are not Q-values.
    with pytest.raises(MetricError, match="cosine"):
        LangChainChunkStore(InMemoryVectorStore(QRAGEmbeddings(adapter_qnet)))

    class NoScores:
        pass

    with pytest.raises(TypeError, match="similarity_search_with_score_by_vector"):
        LangChainChunkStore(NoScores())  # type: ignore[arg-type]


def test_embeddings_are_the_two_towers(texts: list[str], questions: list[str], adapter_qnet: QNetwork) -> None:
    chunks = adapter_qnet.embed_chunks(texts[:3])  # (3, D)
    state = adapter_qnet.embed_states([questions[0]], [[]])  # (1, D)
    lc = QRAGEmbeddings(adapter_qnet)
    torch.testing.assert_close(torch.tensor(lc.embed_documents(texts[:3])), chunks)
    torch.testing.assert_close(torch.tensor([lc.embed_query(questions[0])]), state)
    li = QRAGLlamaIndexEmbedding(adapter_qnet)
    torch.testing.assert_close(torch.tensor(li.get_text_embedding_batch(texts[:3])), chunks)
    torch.testing.assert_close(torch.tensor([li.get_query_embedding(questions[0])]), state)
    # the query embedding is the first-hop state: the store's top hit is the searcher's first hop
    first = MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, texts)).search_one(questions[0], k=1)
    scores = state @ adapter_qnet.embed_chunks(texts).T  # (1, N)
    assert first.hits[0].chunk.id == str(int(scores.argmax()))


@pytest.mark.parametrize("where", [
    {"qrag_position": [1, 3, 5, 7, 9, 11]},
    Filter((Condition("qrag_position", ">=", 4), Condition("qrag_position", "!=", 6)), "and"),
    Filter((Condition("qrag_position", "<", 2), Condition("qrag_position", "nin", (0, 1, 2, 3, 4, 5, 6, 7))), "or"),
    {"no_such_key": 1},
])
def test_a_filter_goes_to_qdrant_and_gives_the_exact_index_s_filtered_hops(  # type: ignore[no-untyped-def]
    where, qdrant_store, texts: list[str], questions: list[str], adapter_qnet: QNetwork
) -> None:
    metas = [{"qrag_position": i} for i in range(len(texts))]
    exact = MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, texts, _ids(len(texts)), metas))
    remote = MultiHopSearcher(adapter_qnet, LangChainChunkStore(qdrant_store))
    for opts in ({"k": 4}, {"k": 3, "beam_size": 2}):
        for a, b in zip(exact.search(questions, filter=where, **opts), remote.search(questions, filter=where, **opts),
                        strict=True):
            assert [h.chunk.id for h in a.hits] == [h.chunk.id for h in b.hits]
            assert [h.q_value for h in a.hits] == pytest.approx([h.q_value for h in b.hits], abs=1e-4)


def test_a_function_filter_cannot_go_to_a_database(qdrant_store, questions: list[str], adapter_qnet: QNetwork) -> None:  # type: ignore[no-untyped-def]
    r = QRAGRetriever.from_vector_store(qdrant_store, adapter_qnet, k=3)
    with pytest.raises(FilterError, match="QdrantVectorStore filters in the database, which cannot run a Python function"):
        r.invoke(questions[0], filter=lambda m: True)
    assert all(d.metadata["qrag_position"] in (2, 5) for d in r.invoke(questions[0], filter={"qrag_position": [2, 5]}))
