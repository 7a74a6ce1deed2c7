"""`qrag.eval.store_memory`: the traced peak from `from_vector_store` through the first answer, and what qrag holds
beside the store, over a real MiniLM collection."""

from __future__ import annotations

import pytest
from langchain_core.vectorstores import InMemoryVectorStore

from qrag.eval.existing_collections import MiniLMEmbeddings
from qrag.eval.store_memory import first_answer_memory
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

