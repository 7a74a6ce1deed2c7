"""QRAGRetriever beyond the standard suite: batch, metadata, ids, events, persistence, bad input."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from pydantic import ValidationError

from qrag.integrations import QRAGRetriever
from qrag.training.search.searcher import MultiHopSearcher


def _ids(docs: list[Document]) -> list[str | None]:
    return [d.id for d in docs]


@pytest.fixture()
def retriever(tiny_searcher: MultiHopSearcher) -> QRAGRetriever:
    return QRAGRetriever(searcher=tiny_searcher, k=3)


def test_metadata_ids_and_per_call_overrides(texts: list[str], questions: list[str], retriever: QRAGRetriever) -> None:
    docs = retriever.invoke(questions[0])
    assert len(docs) == 3 and len(set(_ids(docs))) == 3
    assert [d.metadata["hop"] for d in docs] == [0, 1, 2]
    for d in docs:
        assert d.metadata["score"] == d.metadata["q_value"] and isinstance(d.metadata["score"], float)
        assert d.page_content == texts[int(d.id)] and d.metadata["n"] == int(d.id)  # type: ignore[arg-type]
    assert len(retriever.invoke(questions[0], k=5, max_hops=2)) == 5
    # stop_threshold=-inf never stops: adaptive mode returns max_hops documents
    assert len(retriever.invoke(questions[0], k=None, max_hops=2, stop_threshold=float("-inf"))) == 2
    assert len(retriever.invoke(questions[0], k=100)) == len(texts)  # k above the corpus: all of it
    doc_order = retriever.invoke(questions[0], order="document")
    assert [int(d.id) for d in doc_order] == sorted(int(d.id) for d in doc_order)  # type: ignore[arg-type]


def test_batch_equals_individual_invokes_and_opens_one_run_per_input(questions: list[str], retriever: QRAGRetriever) -> None:
    calls: list[int] = []

    class Counter(BaseCallbackHandler):
        def on_retriever_start(self, *args: Any, **kwargs: Any) -> None:
            calls.append(1)

    batched = retriever.batch(questions, config={"callbacks": [Counter()]})
    assert len(calls) == len(questions)
    single = [retriever.invoke(q) for q in questions]
    assert [_ids(d) for d in batched] == [_ids(d) for d in single]
    for a, b in zip(batched, single, strict=True):
        assert [d.metadata["q_value"] for d in a] == pytest.approx([d.metadata["q_value"] for d in b], abs=1e-5)
    out = retriever.batch([questions[0], ""], return_exceptions=True)
    assert _ids(out[0]) == _ids(single[0]) and isinstance(out[1], ValueError)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty string"):
        retriever.batch([questions[0], ""])


def test_concurrent_invokes_equal_serial(questions: list[str], retriever: QRAGRetriever) -> None:
    serial = [_ids(retriever.invoke(q)) for q in questions]
    got: dict[int, list[str | None]] = {}

    def work(i: int) -> None:
        got[i] = _ids(retriever.invoke(questions[i % len(questions)]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(8)] == [serial[i % len(questions)] for i in range(8)]


async def test_hop_events_in_astream_events_and_async_matches_sync(questions: list[str], retriever: QRAGRetriever) -> None:
    events = [e async for e in retriever.astream_events(questions[0], version="v2") if e["event"] == "on_custom_event"]
    assert [e["name"] for e in events] == ["qrag_hop"] * 3
    assert [e["data"]["hop"] for e in events] == [0, 1, 2]
    docs = await retriever.ainvoke(questions[0])
    assert [e["data"]["id"] for e in events] == _ids(docs) == _ids(retriever.invoke(questions[0]))


async def test_ainvoke_runs_the_search_off_the_event_loop_thread(
    questions: list[str], retriever: QRAGRetriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    search_one = retriever.searcher.search_one

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return search_one(*args, **kwargs)

    monkeypatch.setattr(retriever.searcher, "search_one", spy)
    results = await asyncio.gather(*(retriever.ainvoke(q) for q in questions))
    assert all(len(r) == 3 for r in results)
    assert len(threads) == len(questions) and threading.get_ident() not in threads


def test_save_load_round_trip_restores_every_argument(questions: list[str], tmp_path: Path, tiny_searcher: MultiHopSearcher) -> None:
    r = QRAGRetriever(searcher=tiny_searcher, k=2, max_hops=3, stop_threshold=0.25, beam_size=2, order="document",
                      tags=["t"], metadata={"team": "qa"}, name="mine")
    loaded = QRAGRetriever.load_local(r.save_local(tmp_path / "r"))
    assert loaded.model_dump(exclude={"searcher"}) == r.model_dump(exclude={"searcher"})
    assert loaded.searcher.config == r.searcher.config
    for q in questions:
        a, b = r.invoke(q), loaded.invoke(q)
        assert _ids(a) == _ids(b) and [d.metadata for d in a] == [d.metadata for d in b]
    assert not list(tmp_path.glob("**/*.pkl"))


def test_bad_input_gets_clear_errors(texts: list[str], tmp_path: Path, tiny_searcher: MultiHopSearcher, tiny_encoder_path: Path) -> None:
    with pytest.raises(ValidationError, match="top_k"):
        QRAGRetriever(searcher=tiny_searcher, top_k=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="k must be an integer >= 1, got 0"):
        QRAGRetriever(searcher=tiny_searcher, k=0)
    r = QRAGRetriever(searcher=tiny_searcher)
    with pytest.raises(ValueError, match=r"unknown argument\(s\) \['top_k'\]"):
        r.invoke("q", top_k=3)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got -1"):
        r.invoke("q", k=-1)
    for bad in ("", "   ", 3):
        with pytest.raises(ValueError, match="non-empty string query"):
            r.invoke(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not exist"):
        QRAGRetriever.from_texts(texts, model=str(tmp_path / "no" / "such" / "model"))
    with pytest.raises(ValueError, match="empty corpus"):
        QRAGRetriever.from_texts([], model=tiny_searcher.model)
    with pytest.raises(ValueError, match=r"texts\[1\] must be a str"):
        QRAGRetriever.from_texts(["ok", 7], model=tiny_searcher.model)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="is missing"):
        QRAGRetriever.load_local(tmp_path / "nothing")
    folder = r.save_local(tmp_path / "r")
    (folder / "retriever.json").write_text("{oops")
    with pytest.raises(ValueError, match="corrupt"):
        QRAGRetriever.load_local(folder)


@pytest.mark.usefixtures("bf16_as_native")
def test_from_documents_and_model_from_checkpoint_path(texts: list[str], questions: list[str], tmp_path: Path, tiny_searcher: MultiHopSearcher) -> None:
    tiny_searcher.model.save_pretrained(tmp_path / "ckpt")
    docs = [Document(page_content=t, metadata={"src": i}, id=f"d{i}") for i, t in enumerate(texts)]
    r = QRAGRetriever.from_documents(docs, model=tmp_path / "ckpt", k=2)
    got = r.invoke(questions[0])
    assert [d.id for d in got] == [f"d{d.metadata['src']}" for d in got]
    ref = QRAGRetriever(searcher=tiny_searcher, k=2).invoke(questions[0])
    assert [d.page_content for d in got] == [d.page_content for d in ref]
    # Indexing in bf16 keeps the retriever's contract: k documents, ids intact, fp32 vectors to score.
    fast = QRAGRetriever.from_documents(docs, model=tmp_path / "ckpt", k=2, precision="bf16")
    assert len(fast.invoke(questions[0])) == 2 and fast.searcher.index is not None
    assert fast.searcher.index.vectors.dtype == torch.float32
    # ... and serves its hops from a bf16 copy of the state tower, which a save keeps and a load restores.
    assert fast.searcher.model.serving_precision == "bf16"
    loaded = QRAGRetriever.load_local(fast.save_local(tmp_path / "fast"))
    assert loaded.searcher.model.serving_precision == "bf16"
    assert [d.id for d in loaded.invoke(questions[0])] == [d.id for d in fast.invoke(questions[0])]


def test_from_texts_reads_any_iterable_once(texts: list[str], questions: list[str], adapter_qnet: Any) -> None:
    # LangChain's from_texts takes Iterable[str]: generators of texts, metadatas and ids are read once, not twice.
    metas, ids = [{"n": i} for i in range(len(texts))], [f"c{i}" for i in range(len(texts))]
    from_lists = QRAGRetriever.from_texts(texts, adapter_qnet, metas, ids, k=3)
    from_iters = QRAGRetriever.from_texts((t for t in texts), adapter_qnet, (m for m in metas), iter(ids), k=3)
    index = from_iters.searcher.index
    assert index is not None and index.texts == texts
    for q in questions:
        assert [(d.id, d.page_content, d.metadata) for d in from_iters.invoke(q)] == \
            [(d.id, d.page_content, d.metadata) for d in from_lists.invoke(q)]
