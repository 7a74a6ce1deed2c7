"""Our LlamaIndex mirror of LangChain's standard suite, plus query engine, persistence and events."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import llama_index.core.instrumentation as instrument
import pytest
import torch
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import Document, MetadataMode, NodeWithScore, TextNode

from qrag.integrations import QRAGHopEvent, QRAGLlamaIndexRetriever
from qrag.training.model.precision import choose_precision
from qrag.training.model.qnet import QNetwork


@pytest.fixture(scope="module")
def nodes(texts: list[str]) -> list[TextNode]:
    return [TextNode(text=t, id_=f"node-{i}", metadata={"n": i}) for i, t in enumerate(texts)]


def _make(nodes: list[TextNode], qnet: QNetwork, **kwargs: Any) -> QRAGLlamaIndexRetriever:
    return QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=qnet, **kwargs)


def test_is_a_llama_index_retriever(nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    assert BaseRetriever in type(_make(nodes, adapter_qnet)).__mro__


@pytest.mark.parametrize("top_k", [1, 3])
def test_similarity_top_k_gives_exact_counts_sync(questions: list[str], top_k: int, nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    got = _make(nodes, adapter_qnet, similarity_top_k=top_k).retrieve(questions[0])
    assert len(got) == top_k and all(isinstance(n, NodeWithScore) and n.score is not None for n in got)
    assert len({n.node.node_id for n in got}) == top_k


@pytest.mark.parametrize("top_k", [1, 3])
async def test_similarity_top_k_gives_exact_counts_async(questions: list[str], top_k: int, nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    r = _make(nodes, adapter_qnet, similarity_top_k=top_k)
    got = await r.aretrieve(questions[0])
    assert len(got) == top_k and all(isinstance(n, NodeWithScore) and n.score is not None for n in got)
    assert [n.node.node_id for n in got] == [n.node.node_id for n in r.retrieve(questions[0])]


async def test_aretrieve_runs_off_the_event_loop_thread(
    questions: list[str], nodes: list[TextNode], adapter_qnet: QNetwork, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = _make(nodes, adapter_qnet, similarity_top_k=2)
    threads: list[int] = []
    search_one = r.searcher.search_one

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return search_one(*args, **kwargs)

    monkeypatch.setattr(r.searcher, "search_one", spy)
    assert len(await r.aretrieve(questions[0])) == 2
    assert threads and threading.get_ident() not in threads


def test_nodes_carry_trace_metadata_hidden_from_llm_and_embeddings(questions: list[str], nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    got = _make(nodes, adapter_qnet, similarity_top_k=3).retrieve(questions[1])
    for rank, n in enumerate(got):
        assert n.node.metadata["hop"] == rank and n.node.metadata["q_value"] == n.score
        assert n.node.metadata["n"] == int(n.node.node_id.split("-")[1])
        for mode in (MetadataMode.LLM, MetadataMode.EMBED):
            text = n.node.get_content(metadata_mode=mode)
            assert "q_value" not in text and "hop" not in text and "n: " in text
    assert "hop" not in nodes[0].metadata  # the stored nodes are not mutated


def test_query_engine_returns_the_retrieved_nodes_as_sources(questions: list[str], nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    r = _make(nodes, adapter_qnet, similarity_top_k=3)
    response = RetrieverQueryEngine.from_args(r, llm=MockLLM()).query(questions[0])
    assert [s.node.node_id for s in response.source_nodes] == [n.node.node_id for n in r.retrieve(questions[0])]


def test_hop_events_reach_an_instrumentation_handler(questions: list[str], nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    seen: list[QRAGHopEvent] = []

    class Collect(BaseEventHandler):
        def handle(self, event: BaseEvent, **kwargs: Any) -> None:
            if isinstance(event, QRAGHopEvent):
                seen.append(event)

    handler = Collect()
    root = instrument.get_dispatcher()
    root.add_event_handler(handler)
    try:
        got = _make(nodes, adapter_qnet, similarity_top_k=2).retrieve(questions[2])
    finally:
        root.event_handlers.remove(handler)
    assert [(e.hop, e.node_id, e.q_value) for e in seen] == [(i, n.node.node_id, n.score) for i, n in enumerate(got)]


def test_persist_round_trip(questions: list[str], tmp_path: Path, nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    r = _make(nodes, adapter_qnet, similarity_top_k=2, max_hops=3, stop_threshold=0.1, beam_size=2, order="document")
    loaded = QRAGLlamaIndexRetriever.from_persist_dir(r.persist(tmp_path / "p"))
    assert loaded._args() == r._args() and loaded.searcher.config == r.searcher.config
    for q in questions:
        a, b = r.retrieve(q), loaded.retrieve(q)
        assert [(n.node.node_id, n.score, n.node.metadata) for n in a] == [(n.node.node_id, n.score, n.node.metadata) for n in b]
    with pytest.raises(ValueError, match="not a persisted"):
        QRAGLlamaIndexRetriever.from_persist_dir(tmp_path / "missing")


def test_documents_and_bad_input(texts: list[str], questions: list[str], adapter_qnet: QNetwork) -> None:
    docs = [Document(text=t, doc_id=f"doc-{i}") for i, t in enumerate(texts[:5])]
    r = QRAGLlamaIndexRetriever.from_defaults(documents=docs, model=adapter_qnet, similarity_top_k=10)
    assert sorted(n.node.node_id for n in r.retrieve(questions[0])) == sorted(d.doc_id for d in docs)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        _make([TextNode(text="a")], adapter_qnet, similarity_top_k=0)
    with pytest.raises(ValueError, match="exactly one of"):
        QRAGLlamaIndexRetriever.from_defaults(model=adapter_qnet)
    with pytest.raises(ValueError, match="empty corpus"):
        QRAGLlamaIndexRetriever.from_defaults(nodes=[], model=adapter_qnet)
    with pytest.raises(ValueError, match="non-empty string query"):
        r.retrieve("  ")


@pytest.mark.usefixtures("bf16_as_native")
def test_bf16_precision_indexes_and_serves_in_bf16(texts: list[str], questions: list[str], tiny_encoder_path: Path) -> None:
    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(texts)]
    fp32 = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=str(tiny_encoder_path), similarity_top_k=3,
                                                 precision="fp32")
    fast = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=str(tiny_encoder_path), similarity_top_k=3,
                                                 precision="bf16")
    default = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=str(tiny_encoder_path), similarity_top_k=3)
    assert fast.searcher.model.serving_precision == "bf16" and fp32.searcher.model.serving_precision == "fp32"
    # 'auto' by default: bf16 where this CPU has native bf16 and a timed state pass is clearly faster in it (this
    # CPU's verdict, `serving_why`), fp32 elsewhere; the index in fp32 either way
    served = default.searcher.model
    if choose_precision("auto", torch.device("cpu"))[0] == "bf16":
        assert served.serving_why.endswith(f"{served.serving_precision} serves")  # the timed verdict
    else:
        assert served.serving_precision == "fp32"
    assert default.searcher.store.vectors.dtype == torch.float32
    got = fast.retrieve(questions[0])
    assert len(got) == 3 and {n.node.node_id for n in got} <= {n.node_id for n in nodes}


def _docstore_entry_replaced(data: dict[str, Any], entry: Any) -> dict[str, Any]:
    data["docstore/data"]["node-0"] = entry
    return data


def _docstore_id_swapped(data: dict[str, Any]) -> dict[str, Any]:
    data["docstore/data"]["node-0"]["__data__"]["id_"] = "node-1"
    return data


def _node_edited(field: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> dict[str, Any]:
        data["docstore/data"]["node-0"]["__data__"][field] = value  # valid JSON, a valid node: not the indexed one
        return data
    return edit


DOCSTORE_DAMAGE = {
    "deleted": None,
    "a list": lambda data: [{"bogus": 1}],
    "an empty list": lambda data: [],
    "an entry without a type": lambda data: _docstore_entry_replaced(data, {"bogus": 1}),
    "an entry that is a string": lambda data: _docstore_entry_replaced(data, "bogus"),
    "a node under another id": _docstore_id_swapped,
    "a node without its fields": lambda data: _docstore_entry_replaced(data, {"__type__": "1", "__data__": {"bogus": 1}}),
    "a node's text edited": _node_edited("text", "Mary went to the garden."),
    "a node's embedded metadata edited": _node_edited("metadata", {"n": 7}),
}


@pytest.mark.parametrize("damage", list(DOCSTORE_DAMAGE))
def test_a_damaged_docstore_never_loads(damage: str, tmp_path: Path, nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    saved = _make(nodes, adapter_qnet).persist(tmp_path / "p")
    docstore = saved / "docstore.json"
    change = DOCSTORE_DAMAGE[damage]
    if change is None:
        docstore.unlink()
    else:
        docstore.write_text(json.dumps(change(json.loads(docstore.read_text()))))
    # One clear error naming the file, never a bare TypeError/KeyError or a retriever serving a broken store.
    with pytest.raises(ValueError, match=r"docstore\.json (is missing|is corrupt).*persist the retriever again"):
        QRAGLlamaIndexRetriever.from_persist_dir(saved)


def test_from_defaults_reads_a_generator_of_nodes_once(questions: list[str], nodes: list[TextNode], adapter_qnet: QNetwork) -> None:
    from_list, from_generator = _make(nodes, adapter_qnet), _make((n for n in nodes), adapter_qnet)  # type: ignore[arg-type]
    assert [n.node.node_id for n in from_generator.retrieve(questions[0])] == [n.node.node_id for n in from_list.retrieve(questions[0])]


def test_over_a_store_nodes_come_back_whole_and_later_hops_read_them_as_from_defaults_does(
        questions: list[str], texts: list[str], adapter_qnet: QNetwork) -> None:
    """A Chroma collection filled as LlamaIndex's ingestion fills it (each node's text with its metadata embedded):
    the same nodes, in the same hops, with the same Q-values as `from_defaults` over those nodes, each handed back
    with its metadata and exclusions."""
    chromadb = pytest.importorskip("chromadb")
    pytest.importorskip("llama_index.vector_stores.chroma")
    import uuid

    from llama_index.vector_stores.chroma import ChromaVectorStore

    from qrag.integrations import QRAGLlamaIndexEmbedding

    nodes = [TextNode(text=t, id_=f"n{i}", metadata={"room": f"room {i % 3}", "n": i},
                      excluded_llm_metadata_keys=["n"]) for i, t in enumerate(texts)]
    vectors = QRAGLlamaIndexEmbedding(adapter_qnet).get_text_embedding_batch(
        [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    collection = chromadb.EphemeralClient().create_collection(f"li-{uuid.uuid4().hex[:10]}",
                                                              configuration={"hnsw": {"space": "ip"}})
    store = ChromaVectorStore(chroma_collection=collection)
    store.add([n.model_copy(update={"embedding": v}) for n, v in zip(nodes, vectors, strict=True)])
    exact = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=adapter_qnet, similarity_top_k=3)
    over = QRAGLlamaIndexRetriever.from_vector_store(store, adapter_qnet, similarity_top_k=3)
    for q in questions:
        a, b = exact.retrieve(q), over.retrieve(q)
        assert [n.node.node_id for n in b] == [n.node.node_id for n in a]
        assert [n.node.metadata["q_value"] for n in b] == pytest.approx([n.node.metadata["q_value"] for n in a],
                                                                        abs=1e-4)
        for got, want in zip(b, a, strict=True):
            assert {k: got.node.metadata[k] for k in ("room", "n", "hop")} == {
                k: want.node.metadata[k] for k in ("room", "n", "hop")}
            assert got.node.get_content() == want.node.get_content()
            assert "n" in got.node.excluded_llm_metadata_keys
