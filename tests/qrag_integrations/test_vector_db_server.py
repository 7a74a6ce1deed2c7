"""Multi-hop search against a real vector-database server: Chroma's own server (`chroma run`, from the
`chromadb` package of the `chroma` extra), started here on 127.0.0.1 and reached over its HTTP API through
LangChain's and LlamaIndex's Chroma integrations. Results equal the exact in-process index, Q-values and
stop decisions included, because the collection's metric is checked ('ip') and its distances are turned
back into inner products.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # offline: no usage reports from the client
pytest.importorskip("chromadb", reason="the Chroma server needs the 'chroma' extra: pip install 'qrag[chroma]'")
pytest.importorskip("langchain_chroma", reason="needs the 'chroma' extra: pip install 'qrag[chroma]'")
pytest.importorskip("llama_index.vector_stores.chroma", reason="needs the 'chroma' extra: pip install 'qrag[chroma]'")

import chromadb  # noqa: E402
from langchain_chroma import Chroma  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.vector_stores.chroma import ChromaVectorStore  # noqa: E402

from qrag.integrations import (  # noqa: E402
    LangChainChunkStore,
    LlamaIndexChunkStore,
    MetricError,
    QRAGEmbeddings,
    QRAGLlamaIndexEmbedding,
    QRAGLlamaIndexRetriever,
    QRAGRetriever,
)
from qrag.training.model.qnet import QNetwork  # noqa: E402
from qrag.training.search.filters import Condition, Filter  # noqa: E402
from qrag.training.search.index import ChunkIndex  # noqa: E402
from qrag.training.search.searcher import MultiHopSearcher, SearchResult  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:legacy embedding function config:DeprecationWarning")
IP = {"hnsw": {"space": "ip"}}
OPTIONS = [{"k": 4}, {"k": 3, "beam_size": 2}, {"k": None, "stop_threshold": 0.0}, {"k": 5, "max_hops": 2, "order": "document"}]


def _ids(n: int) -> list[str]:
    return [f"chunk-{i}" for i in range(n)]


def chroma_command() -> str:
    """The `chroma` console script the chromadb package installs beside this interpreter."""
    found = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    assert found, "chromadb is installed but its `chroma` command is not: reinstall the 'chroma' extra"
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A Chroma server process on a free local port, stopped after the module."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    data = tmp_path_factory.mktemp("chroma-data")
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    log = data / "server.log"  # a file, not a pipe: the server logs every request and would block on a full pipe
    with log.open("wb") as sink:
        proc = subprocess.Popen([chroma_command(), "run", "--path", str(data / "db"), "--host", "127.0.0.1",
                                 "--port", str(port)], stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:
                assert time.monotonic() < deadline, "the Chroma server did not answer within 60 s"
                time.sleep(0.2)
        yield port, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def langchain_store(server: tuple[int, Any], texts: list[str], adapter_qnet: QNetwork) -> Chroma:
    store = Chroma("qrag-langchain", QRAGEmbeddings(adapter_qnet), host="127.0.0.1", port=server[0],
                   collection_configuration=IP)  # type: ignore[arg-type]
    store.add_texts(texts, metadatas=[{"qrag_position": i} for i in range(len(texts))], ids=_ids(len(texts)))
    return store


@pytest.fixture(scope="module")
def llama_store(server: tuple[int, Any], texts: list[str], adapter_qnet: QNetwork) -> ChromaVectorStore:
    store = ChromaVectorStore(host="127.0.0.1", port=server[0], collection_name="qrag-llama-index",
                              collection_kwargs={"configuration": IP})
    vectors = QRAGLlamaIndexEmbedding(adapter_qnet).get_text_embedding_batch(texts)
    # qrag's bookkeeping key kept out of the embedded text, so each node is embedded and hopped over as its text
    store.add([TextNode(text=t, id_=i, metadata={"qrag_position": n}, embedding=v,
                        excluded_embed_metadata_keys=["qrag_position"], excluded_llm_metadata_keys=["qrag_position"])
               for n, (t, i, v) in enumerate(zip(texts, _ids(len(texts)), vectors, strict=True))])
    return store


@pytest.fixture(scope="module")
def exact(texts: list[str], adapter_qnet: QNetwork) -> MultiHopSearcher:
    return MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, texts, _ids(len(texts))))


def assert_same_results(a: list[SearchResult], b: list[SearchResult]) -> None:
    for x, y in zip(a, b, strict=True):
        assert [h.chunk.id for h in x.hits] == [h.chunk.id for h in y.hits]
        assert [h.chunk.text for h in x.hits] == [h.chunk.text for h in y.hits]
        assert [h.chunk.position for h in x.hits] == [h.chunk.position for h in y.hits]
        assert [h.q_value for h in x.hits] == pytest.approx([h.q_value for h in y.hits], abs=1e-4)
        assert [h.past_stop for h in x.hits] == [h.past_stop for h in y.hits]


def test_server_is_a_separate_process_reached_over_http(server: tuple[int, Any], langchain_store: Chroma) -> None:
    port, proc = server
    assert proc.poll() is None and proc.pid != os.getpid()
    fresh = chromadb.HttpClient(host="127.0.0.1", port=port)  # another client sees what the store wrote
    assert fresh.get_collection("qrag-langchain").count() == 12


@pytest.mark.parametrize("opts", OPTIONS)
def test_langchain_chroma_multi_hop_equals_exact_index(
    opts: dict[str, Any], langchain_store: Chroma, exact: MultiHopSearcher, questions: list[str], adapter_qnet: QNetwork
) -> None:
    remote = MultiHopSearcher(adapter_qnet, LangChainChunkStore(langchain_store))
    assert_same_results(exact.search(questions, **opts), remote.search(questions, **opts))


@pytest.mark.parametrize("opts", OPTIONS)
def test_llama_index_chroma_multi_hop_equals_exact_index(
    opts: dict[str, Any], llama_store: ChromaVectorStore, exact: MultiHopSearcher, questions: list[str],
    adapter_qnet: QNetwork,
) -> None:
    remote = MultiHopSearcher(adapter_qnet, LlamaIndexChunkStore(llama_store))
    assert_same_results(exact.search(questions, **opts), remote.search(questions, **opts))


def test_retrievers_from_the_server(
    langchain_store: Chroma, llama_store: ChromaVectorStore, exact: MultiHopSearcher, questions: list[str],
    adapter_qnet: QNetwork,
) -> None:
    expected = exact.search_one(questions[0], k=3)
    docs = QRAGRetriever.from_vector_store(langchain_store, adapter_qnet, k=3).invoke(questions[0])
    assert [d.id for d in docs] == [h.chunk.id for h in expected.hits]
    assert [d.metadata["q_value"] for d in docs] == pytest.approx([h.q_value for h in expected.hits], abs=1e-4)
    li = QRAGLlamaIndexRetriever.from_vector_store(llama_store, adapter_qnet, similarity_top_k=3)
    nodes = li.retrieve(questions[0])
    assert [n.node.node_id for n in nodes] == [h.chunk.id for h in expected.hits]
    assert [n.node.get_content() for n in nodes] == [h.chunk.text for h in expected.hits]
    assert [n.score for n in nodes] == pytest.approx([h.q_value for h in expected.hits], abs=1e-4)
    with pytest.raises(ValueError, match="external vector store"):
        li.persist("/tmp/qrag-never-written")


def test_metric_is_checked(server: tuple[int, Any], texts: list[str], adapter_qnet: QNetwork) -> None:
    """Cosine or L2 collections rank differently and give other scores: refused, naming the fix."""
    for space in ("cosine", "l2"):
        lc = Chroma(f"qrag-{space}", QRAGEmbeddings(adapter_qnet), host="127.0.0.1", port=server[0],
                    collection_configuration={"hnsw": {"space": space}})  # type: ignore[arg-type, typeddict-item]
        with pytest.raises(MetricError, match=f"ranks by '{space}'.*'space': 'ip'"):
            LangChainChunkStore(lc)
        li = ChromaVectorStore(host="127.0.0.1", port=server[0], collection_name=f"qrag-li-{space}",
                               collection_kwargs={"configuration": {"hnsw": {"space": space}}})
        with pytest.raises(MetricError, match=f"ranks by '{space}'"):
            LlamaIndexChunkStore(li)
    # Chroma's default collection (no configuration) is L2.
    plain = Chroma("qrag-default", QRAGEmbeddings(adapter_qnet), host="127.0.0.1", port=server[0])
    with pytest.raises(MetricError, match="ranks by 'l2'"):
        QRAGRetriever.from_vector_store(plain, adapter_qnet, k=3)


FILTERS = [
    Filter((Condition("qrag_position", "in", (1, 3, 5, 7, 9, 11)),)),
    Filter((Condition("qrag_position", ">=", 4), Condition("qrag_position", "!=", 6)), "and"),
    Filter((Condition("qrag_position", "<", 2), Condition("qrag_position", "nin", tuple(range(8)))), "or"),
]


@pytest.mark.parametrize("where", FILTERS)
def test_filters_go_to_the_chroma_server_and_give_the_exact_index_s_filtered_hops(
    where: Filter, langchain_store: Chroma, llama_store: ChromaVectorStore, texts: list[str], questions: list[str],
    adapter_qnet: QNetwork,
) -> None:
    metas = [{"qrag_position": i} for i in range(len(texts))]
    exact = MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, texts, _ids(len(texts)), metas))
    for store in (LangChainChunkStore(langchain_store), LlamaIndexChunkStore(llama_store)):
        remote = MultiHopSearcher(adapter_qnet, store)
        for opts in ({"k": 4}, {"k": 3, "beam_size": 2}):
            assert_same_results(exact.search(questions, filter=where, **opts),
                                remote.search(questions, filter=where, **opts))


def test_adds_and_deletes_go_to_the_server(server: tuple[int, Any], texts: list[str], questions: list[str],
                                           adapter_qnet: QNetwork) -> None:
    store = Chroma("qrag-living", QRAGEmbeddings(adapter_qnet), host="127.0.0.1", port=server[0],
                   collection_configuration=IP)  # type: ignore[arg-type]
    store.add_texts(texts[:6], ids=_ids(6), metadatas=[{"qrag_position": i} for i in range(6)])
    r = QRAGRetriever.from_vector_store(store, adapter_qnet, k=12)
    assert r.add_texts(texts[6:], [{"qrag_position": i} for i in range(6, 12)], ids=_ids(12)[6:]) == _ids(12)[6:]
    r.delete(_ids(12)[:2])
    exact = MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, texts[2:], _ids(12)[2:]))
    assert [d.id for d in r.invoke(questions[0])] == [h.chunk.id for h in exact.search_one(questions[0], k=12).hits]
    li_store = ChromaVectorStore(host="127.0.0.1", port=server[0], collection_name="qrag-li-living",
                                 collection_kwargs={"configuration": IP})
    li = QRAGLlamaIndexRetriever.from_vector_store(li_store, adapter_qnet, similarity_top_k=12)
    li.insert_nodes([TextNode(text=t, id_=i, metadata={"qrag_position": n}, excluded_embed_metadata_keys=["qrag_position"])
                     for n, (t, i) in enumerate(zip(texts, _ids(12), strict=True))])  # embedded by qrag's chunk tower
    li.delete_nodes(_ids(12)[:2])
    assert [n.node.node_id for n in li.retrieve(questions[0])] == [d.id for d in r.invoke(questions[0])]
