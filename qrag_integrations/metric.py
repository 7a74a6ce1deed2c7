"""Which metric a vector store ranks by: qrag's hops need the raw inner product ⟨query, g_φ(c)⟩.

It is the Q-value the stop rule compares with its threshold. Framework-free (no LangChain / LlamaIndex import).
"""

from __future__ import annotations

from typing import Any

IP_SPACE_HINT = "configuration={'hnsw': {'space': 'ip'}}"


class MetricError(ValueError):
    """A vector store ranks by a metric other than the inner product, so its scores are not Q-values."""


def chroma_space(collection: Any) -> str:
    """The distance space ('ip', 'cosine', 'l2') of a Chroma collection (its configuration, else metadata)."""
    config = getattr(collection, "configuration", None) or {}
    if isinstance(config, dict):
        for index in ("hnsw", "spann"):
            space = (config.get(index) or {}).get("space")
            if space:
                return str(space)
    return str((getattr(collection, "metadata", None) or {}).get("hnsw:space", "l2"))  # Chroma's default: l2


def check_chroma_ip(collection: Any) -> None:
    """Raise `MetricError` unless the Chroma collection ranks by inner product (space 'ip').

    Chroma's 'ip' distance is `1 − ⟨q, c⟩`: callers turn it back into the inner product.
    """
    space = chroma_space(collection)
    if space != "ip":
        raise MetricError(f"the Chroma collection {collection.name!r} ranks by {space!r}; qrag's hops need inner "
                          f"products: create the collection with {IP_SPACE_HINT} (langchain-chroma: "
                          "collection_configuration=..., the same dict).")
