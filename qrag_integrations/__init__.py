"""Thin LangChain and LlamaIndex adapters over qrag's multi-hop search.

Frameworks are imported only when a class is first used, so `import qrag.integrations` works without
LangChain or LlamaIndex installed:

    from qrag.integrations import QRAGRetriever             # needs qrag[langchain]
    from qrag.integrations import QRAGLlamaIndexRetriever   # needs qrag[llama-index]
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qrag.integrations.langchain_embeddings import LangChainChunkStore, QRAGEmbeddings
    from qrag.integrations.langchain_retriever import QRAGRetriever
    from qrag.integrations.llama_index_embeddings import QRAGLlamaIndexEmbedding
    from qrag.integrations.llama_index_retriever import QRAGHopEvent, QRAGLlamaIndexRetriever
    from qrag.integrations.llama_index_store import LlamaIndexChunkStore
    from qrag.integrations.metric import MetricError

_EXPORTS = {
    "QRAGRetriever": ("langchain_retriever", "qrag[langchain]"),
    "QRAGEmbeddings": ("langchain_embeddings", "qrag[langchain]"),
    "LangChainChunkStore": ("langchain_embeddings", "qrag[langchain]"),
    "QRAGLlamaIndexRetriever": ("llama_index_retriever", "qrag[llama-index]"),
    "QRAGHopEvent": ("llama_index_retriever", "qrag[llama-index]"),
    "QRAGLlamaIndexEmbedding": ("llama_index_embeddings", "qrag[llama-index]"),
    "LlamaIndexChunkStore": ("llama_index_store", "qrag[llama-index]"),
    "MetricError": ("metric", "qrag"),
}

__all__ = [
    "LangChainChunkStore",
    "LlamaIndexChunkStore",
    "MetricError",
    "QRAGEmbeddings",
    "QRAGHopEvent",
    "QRAGLlamaIndexEmbedding",
    "QRAGLlamaIndexRetriever",
    "QRAGRetriever",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'qrag.integrations' has no attribute {name!r}")
    module, extra = _EXPORTS[name]
    try:
        mod = importlib.import_module(f"qrag.integrations.{module}")
    except ImportError as e:
        raise ImportError(f"{name} needs an optional dependency ({e.name}): pip install '{extra}'.") from e
    return getattr(mod, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
