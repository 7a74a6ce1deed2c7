"""The method names `qrag-eval` compares, apart from the retrievers themselves.

Importing this needs no torch, so the command line answers `--help` before any model library loads.
"""

from __future__ import annotations

METHODS = ("bm25", "dense", "cosine", "hybrid", "multihop", "qrag", "qrag+stop", "init", "oracle")
"""Method names accepted by `make_retriever` (and `qrag-eval --methods`); 'init' is the model the checkpoint was
fine-tuned from (`qrag-train --init`), searched with its own saved settings."""
NEEDS_CHECKPOINT = ("qrag", "qrag+stop", "init")
ADAPTIVE = ("qrag+stop",)  # methods whose stop rule decides how many chunks they return
BASELINES = ("bm25", "dense", "cosine", "hybrid", "multihop")
"""The untrained methods a trained one is measured against (the oracle is a ceiling, not a baseline): BM25, the
untrained inner product, cosine search with the base encoder (a vector store), their hybrid, untrained hops."""
FLOORS = ("hybrid", "cosine", "dense")
"""Single-shot floors a sweep pairs every method against, the first present first (recall.md): on paragraph text
the hybrid is what practitioners run, cosine a plain vector store, dense qrag's untrained inner product."""
