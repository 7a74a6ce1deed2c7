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

from typing import TYPE_CHECKING

import lazy_loader

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

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "integrations": ["LangChainChunkStore", "QRAGEmbeddings", "QRAGHopEvent", "QRAGLlamaIndexEmbedding",
                     "QRAGLlamaIndexRetriever", "QRAGRetriever"],
    "training.model.qnet": ["QNetwork"],
    "training.search.index": ["ChunkIndex"],
    "training.search.searcher": ["MultiHopSearcher", "load_model"],
})
