"""The search floor: multi-hop search over chunk vectors, the facade the adapters and eval import.

Imports the model floor and the helpers beside it, never the learning floor. The names below load on first use.

- `hops.py`: the one hop engine (states, Q-values, masking, slices, greedy and beam hops, the stop point),
  for training, evaluation and serving alike;
- `searcher.py`: `MultiHopSearcher` and `load_model`, the user-facing search; `settings.py`: `SearchConfig`;
- `index.py`: `ChunkIndex` (exact torch, FAISS) and external stores; `chunk_vectors.py`: chunk vectors by text;
- `lexical.py`: BM25 evidence and rank fusion; `neighbours.py`: a pool's nearest passages, for hard negatives; `searcher_folder.py`: a saved searcher's folder.

The input checks of `qrag.training.input_checks` are re-exported here, so an adapter checks what users pass
with the rules the searcher applies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qrag.training.input_checks import (
        check_metadatas,
        check_query,
        check_text_list,
        check_texts,
        check_trace_keys,
    )
    from qrag.training.search.index import Chunk, ChunkIndex, IndexLoadError, ScoredChunk, search_rows
    from qrag.training.search.neighbours import pool_neighbours
    from qrag.training.search.searcher import MultiHopSearcher, SearchResult, load_model, search_many
    from qrag.training.search.searcher_folder import recover_folder
    from qrag.training.search.settings import (
        FILLS,
        FROM_MODEL,
        Fill,
        FromModel,
        Order,
        SearchConfig,
        SearchError,
    )

_EXPORTS = {
    **dict.fromkeys(["check_metadatas", "check_query", "check_text_list", "check_texts", "check_trace_keys"],
                    "qrag.training.input_checks"),
    **dict.fromkeys(["Chunk", "ChunkIndex", "IndexLoadError", "ScoredChunk", "search_rows"], "qrag.training.search.index"),
    **dict.fromkeys(["MultiHopSearcher", "SearchResult", "load_model", "search_many"], "qrag.training.search.searcher"),
    "pool_neighbours": "qrag.training.search.neighbours",
    "recover_folder": "qrag.training.search.searcher_folder",
    **dict.fromkeys(["FILLS", "FROM_MODEL", "Fill", "FromModel", "Order", "SearchConfig", "SearchError"],
                    "qrag.training.search.settings"),
}

__all__ = ["Chunk", "ChunkIndex", "FILLS", "FROM_MODEL", "Fill", "FromModel", "IndexLoadError",
           "MultiHopSearcher", "Order", "ScoredChunk", "SearchConfig", "SearchError", "SearchResult",
           "check_metadatas", "check_query", "check_text_list", "check_texts", "check_trace_keys", "load_model",
           "pool_neighbours", "recover_folder", "search_many", "search_rows"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'qrag.training.search' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
