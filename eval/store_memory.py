"""What `from_vector_store` costs in memory from the call through the first answer, over a collection a user has.

The collection is built first (its vectors are the database's memory, not qrag's); then Python's allocations are
traced (`tracemalloc`) while qrag checks the store, reads it for BM25 (texts, ids and metadata) and answers one
question. The peak is what a server pays on its first request beyond the store; torch's and ONNX Runtime's own
memory is not traced by Python and is reported apart: the process's resident size after the answer (VmRSS,
beside the caller's reading before the model loads) and its peak.
"""

from __future__ import annotations

import resource
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from qrag.eval.query_cost import rss_kb
from qrag.training.model import QNetwork


def first_answer_memory(store: Any, model: QNetwork, question: str,
                        build: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Peak Python allocations (bytes) from `from_vector_store(store, model)` through `invoke(question)`, the
    memory qrag then holds beside the store (`memory()`), the documents returned and the seconds taken.

    `build` (default `QRAGRetriever.from_vector_store`) makes the retriever from (store, model)."""
    if build is None:
        from qrag.integrations import QRAGRetriever

        build = QRAGRetriever.from_vector_store
    tracemalloc.start()
    started = time.perf_counter()
    try:
        retriever = build(store, model)
        built = time.perf_counter()
        docs = retriever.invoke(question)
        answered = time.perf_counter()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = retriever.searcher.store.memory() if hasattr(retriever.searcher.store, "memory") else {}
    return {"peak_traced_bytes": int(peak), "held_beside_store": held, "returned": [d.id for d in docs],
            "seconds_to_build": built - started, "seconds_to_answer": answered - built,
            "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "resident_after_answer_kib": rss_kb("VmRSS")}


__all__ = ["first_answer_memory"]
