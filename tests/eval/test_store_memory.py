"""`qrag.eval.store_memory`: the traced peak from `from_vector_store` through the first answer, and what qrag holds
beside the store, over a real MiniLM collection."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.vectorstores import InMemoryVectorStore

from qrag.eval import store_memory
from qrag.eval.existing_collections import MiniLMEmbeddings
from qrag.eval.store_memory import first_answer_memory, resident_kib
from qrag.training.search import load_model
from tests.qrag_integrations.test_existing_collections import IDS, QUESTIONS, TEXTS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.slow
def test_the_first_answer_is_traced_and_the_bm25_beside_the_store_counted() -> None:
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_texts(TEXTS, ids=IDS)
    got = first_answer_memory(store, load_model("qrag/hotpotqa-minilm"), QUESTIONS[0])
    assert got["returned"] and set(got["returned"]) <= set(IDS)
    assert got["peak_traced_bytes"] > 0 and got["held_beside_store"]["lexical"] > 0
    assert got["held_beside_store"]["ids"] > 0 and got["seconds_to_answer"] > 0
    assert 0 < got["resident_after_answer_kib"] <= got["max_rss_kib"]


def test_the_resident_size_is_read_from_proc_and_none_without_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1536 kB\nThreads:\t2\n", encoding="utf-8")
    real = store_memory.Path
    monkeypatch.setattr(store_memory, "Path", lambda p: status if p == "/proc/self/status" else real(p))
    assert resident_kib() == 1536
    monkeypatch.setattr(store_memory, "Path", lambda p: tmp_path / "missing")
    assert resident_kib() is None
