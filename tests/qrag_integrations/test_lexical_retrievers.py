"""Both retrievers with a model that weighs lexical evidence (METHOD.md §4.5): the BM25 index is built from the
texts, kept by `save_local` / `persist` (the loaded retriever returns the same documents and scores), refused by
name when damaged, and the score is the Q-value plus the evidence."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from llama_index.core.schema import TextNode

from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever
from qrag.training.model.qnet import QNetwork
from qrag.training.search.settings import HopSettings


@pytest.fixture()
def lexical_qnet(adapter_qnet: QNetwork) -> QNetwork:
    qnet = copy.deepcopy(adapter_qnet)
    qnet.hop_settings = HopSettings(max_hops=3, stop_threshold=None, lexical_weight=0.5)
    return qnet


def _view(docs: list) -> list[tuple[str | None, float, float]]:
    return [(d.id, round(d.metadata["score"], 5), round(d.metadata["q_value"], 5)) for d in docs]


def test_langchain_keeps_the_bm25_index_it_built(texts: list[str], questions: list[str], lexical_qnet: QNetwork,
                                                 tmp_path: Path) -> None:
    retriever = QRAGRetriever.from_texts(texts, model=lexical_qnet, k=4)
    assert retriever.searcher.store.lexical is not None  # type: ignore[union-attr]
    docs = retriever.invoke(questions[0])
    # 'milk' is in three chunks: the evidence lifts at least one of them above its Q-value, never below it.
    assert all(score >= q for _, score, q in _view(docs)) and any(score > q for _, score, q in _view(docs))
    plain = retriever.invoke(questions[0], lexical_weight=0)
    assert all(score == q for _, score, q in _view(plain))
    retriever.save_local(tmp_path / "saved")
    assert (tmp_path / "saved" / "index" / "lexical" / "lexical.json").is_file()
    loaded = QRAGRetriever.load_local(tmp_path / "saved")
    assert loaded.searcher.model.hop_settings.lexical_weight == 0.5
    assert [_view(loaded.invoke(q)) for q in questions] == [_view(retriever.invoke(q)) for q in questions]
    next((tmp_path / "saved" / "index" / "lexical").glob("*.npy")).unlink()
    with pytest.raises(ValueError, match="the lexical index in .* is damaged"):
        QRAGRetriever.load_local(tmp_path / "saved")


def test_llama_index_persists_the_bm25_index(texts: list[str], questions: list[str], lexical_qnet: QNetwork,
                                             tmp_path: Path) -> None:
    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(texts)]
    retriever = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=lexical_qnet, similarity_top_k=3)
    found = retriever.retrieve(questions[0])
    # The score is the Q-value plus 0.5 × the evidence: never below it, above it where the question's words are.
    assert all(n.score >= n.node.metadata["q_value"] for n in found)  # type: ignore[operator]
    assert any(n.score > n.node.metadata["q_value"] + 1e-6 for n in found)  # type: ignore[operator]
    retriever.persist(tmp_path / "p")
    loaded = QRAGLlamaIndexRetriever.from_persist_dir(tmp_path / "p")
    assert loaded.searcher.index.lexical is not None  # type: ignore[union-attr]
    again = loaded.retrieve(questions[0])
    assert [(n.node.node_id, n.score) for n in again] == [(n.node.node_id, n.score) for n in found]
    assert loaded.lexical_weight == "model" and loaded.searcher.model.hop_settings.lexical_weight == 0.5
    loaded.lexical_weight = 0.0
    plain = loaded.retrieve(questions[0])
    assert all(n.score == pytest.approx(n.node.metadata["q_value"]) for n in plain)  # the evidence is what lifted them
