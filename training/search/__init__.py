"""The search floor: multi-hop search over chunk vectors, the facade the adapters and eval import.

Imports the model floor and the helpers beside it, never the learning floor. The names below load on first use.

- `hops.py`: the one hop engine (states, Q-values, masking, slices, greedy and beam hops, the stop point),
  for training, evaluation and serving alike;
- `searcher.py`: `MultiHopSearcher` and `load_model`, the user-facing search; `settings.py`: `SearchConfig`;
- `index.py`: `ChunkIndex` (exact torch, FAISS) and external stores; `versions.py`: its versions, rows and filter
  masks; `index_folder.py`: its saved folder; `chunk_vectors.py`: chunk vectors by text;
  `windows.py`: long chunks scored by their best window;
- `filters.py`: metadata filters (a row mask in-process, handed to an external store);
- `lexical.py`: BM25 evidence and rank fusion; `neighbours.py`: a pool's nearest passages, for hard negatives; `searcher_folder.py`: a saved searcher's folder.

The input checks of `qrag.training.input_checks` are re-exported here, so an adapter checks what users pass
with the rules the searcher applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

from qrag.training.input_checks import (  # stdlib only: imported as it is
    check_delete_ids,
    check_ids,
    check_json_metadata,
    check_metadatas,
    check_query,
    check_retriever_backend,
    check_text_list,
    check_texts,
    check_trace_keys,
)

if TYPE_CHECKING:
    from qrag.training.search.filters import Condition, Filter, FilterError, FilterSpec, Kind, value_kind
    from qrag.training.search.index import (
        Chunk,
        ChunkIndex,
        IndexLoadError,
        LongChunks,
        ScoredChunk,
        search_rows,
    )
    from qrag.training.search.lexical import LexicalIndex, lexical_evidence
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

__getattr__, __dir__, _lazy = lazy_loader.attach(__name__, submod_attrs={
    "filters": ["Condition", "Filter", "FilterError", "FilterSpec", "Kind", "value_kind"],
    "index": ["Chunk", "ChunkIndex", "IndexLoadError", "LongChunks", "ScoredChunk", "search_rows"],
    "lexical": ["LexicalIndex", "lexical_evidence"],
    "neighbours": ["pool_neighbours"],
    "searcher": ["MultiHopSearcher", "SearchResult", "load_model", "search_many"],
    "searcher_folder": ["recover_folder"],
    "settings": ["FILLS", "FROM_MODEL", "Fill", "FromModel", "Order", "SearchConfig", "SearchError"],
})
__all__ = [*_lazy, "check_delete_ids", "check_ids", "check_json_metadata", "check_metadatas", "check_query",
           "check_retriever_backend", "check_text_list", "check_texts", "check_trace_keys"]
