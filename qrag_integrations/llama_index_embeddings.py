"""LlamaIndex `BaseEmbedding` over qrag's two towers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from qrag.training.model import QNetwork, model_lock
from qrag.training.search import check_query, check_text_list, load_model


class QRAGLlamaIndexEmbedding(BaseEmbedding):
    """Texts (nodes) through the chunk tower g_φ, queries through the state tower f_θ on the bare question.

    The query vector is the state before any hop, so a vector index built with this embedding (and a
    dot-product similarity) ranks exactly like qrag's first hop. Multi-hop search needs
    `QRAGLlamaIndexRetriever`.

    Example:
        >>> emb = QRAGLlamaIndexEmbedding("all-MiniLM-L6-v2")
        >>> len(emb.get_text_embedding("Mary took the milk.")), len(emb.get_query_embedding("Where is the milk?"))
        (384, 384)
    """

    _qnet: QNetwork = PrivateAttr()

    def __init__(self, model: QNetwork | str | Path, embed_batch_size: int = 64, **kwargs: Any) -> None:
        qnet = load_model(model).eval()
        super().__init__(model_name=qnet.config.encoder, embed_batch_size=embed_batch_size, **kwargs)
        self._qnet = qnet

    @classmethod
    def class_name(cls) -> str:
        return "QRAGLlamaIndexEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        check_query(query, "QRAGLlamaIndexEmbedding")
        with model_lock(self._qnet):
            state = self._qnet.embed_states([query], [[]])  # (1, D)
        return state[0].cpu().tolist()  # type: ignore[no-any-return]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        texts = check_text_list(texts, "texts")
        with model_lock(self._qnet):
            vectors = self._qnet.embed_chunks(texts, batch_size=self.embed_batch_size)  # (N, D)
        return vectors.cpu().tolist()  # type: ignore[no-any-return]
