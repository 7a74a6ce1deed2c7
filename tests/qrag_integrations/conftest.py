"""Fixtures of the adapter tests: a tiny Q-network (its own object, eval mode) over a small corpus."""

from __future__ import annotations

from pathlib import Path

import pytest
from adapter_corpus import TEXTS  # pytest puts tests/qrag_integrations on sys.path

from training.index import ChunkIndex
from training.qnet import QNetwork
from training.search import MultiHopSearcher


@pytest.fixture(scope="session")
def adapter_qnet(tiny_encoder_path: Path) -> QNetwork:
    """A session-wide tiny model of our own (not the shared fixture: the searcher switches it to eval)."""
    return QNetwork.from_encoder(str(tiny_encoder_path))


@pytest.fixture(scope="session")
def tiny_searcher(adapter_qnet: QNetwork) -> MultiHopSearcher:
    return MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, TEXTS, metadatas=[{"n": i} for i in range(12)]))
