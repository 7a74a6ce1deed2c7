"""qrag: multi-step retrieval with a value-based (soft Q(λ)) trained embedder, zero LLM calls per hop.

One import namespace for the whole distribution:

    from qrag import QRAGRetriever            # LangChain retriever (needs qrag[langchain])
    from qrag import QRAGLlamaIndexRetriever  # LlamaIndex retriever (needs qrag[llama-index])
    from qrag import QNetwork, MultiHopSearcher, ChunkIndex, load_model

The subpackages are `qrag.training` (the Q-network, its RL, multi-hop search, indexes and data),
`qrag.integrations` (the framework adapters) and `qrag.eval` (benchmarks, baselines, reader, reports).
Everything is imported on first use, so `import qrag` is cheap and needs neither framework.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qrag.integrations import (
        LangChainChunkStore,
        QRAGEmbeddings,
        QRAGHopEvent,
        QRAGLlamaIndexEmbedding,
        QRAGLlamaIndexRetriever,
        QRAGRetriever,
    )
    from qrag.training.model.qnet import QNetwork
    from qrag.training.search.index import ChunkIndex
    from qrag.training.search.searcher import MultiHopSearcher, load_model

__version__ = "0.1.0"

_EXPORTS = {
    "QRAGRetriever": "qrag.integrations",
    "QRAGEmbeddings": "qrag.integrations",
    "LangChainChunkStore": "qrag.integrations",
    "QRAGLlamaIndexRetriever": "qrag.integrations",
    "QRAGHopEvent": "qrag.integrations",
    "QRAGLlamaIndexEmbedding": "qrag.integrations",
    "QNetwork": "qrag.training.model.qnet",
    "ChunkIndex": "qrag.training.search.index",
    "MultiHopSearcher": "qrag.training.search.searcher",
    "load_model": "qrag.training.search.searcher",
}

__all__ = [
    "ChunkIndex",
    "LangChainChunkStore",
    "MultiHopSearcher",
    "QNetwork",
    "QRAGEmbeddings",
    "QRAGHopEvent",
    "QRAGLlamaIndexEmbedding",
    "QRAGLlamaIndexRetriever",
    "QRAGRetriever",
    "load_model",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'qrag' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
