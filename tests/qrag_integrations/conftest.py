"""Fixtures of the adapter tests: a tiny Q-network (its own object, eval mode) over a small corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from qrag.training.model.qnet import QNetwork
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher

TEXTS = [
    "Mary went to the kitchen.", "John picked up the apple.", "Mary took the milk there.",
    "Sandra travelled to the office.", "John went to the garden.", "Daniel dropped the football.",
    "The milk is in the fridge.", "Sandra grabbed the ball.", "Daniel journeyed to the bedroom.",
    "Mary left the milk.", "John moved to the hallway.", "The apple is red.",
]
QUESTIONS = ["Where is the milk?", "Where is the apple?", "Who has the ball?", "Where is Daniel?"]


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return list(TEXTS)


@pytest.fixture(scope="session")
def questions() -> list[str]:
    return list(QUESTIONS)


@pytest.fixture(scope="session")
def adapter_qnet(tiny_encoder_path: Path) -> QNetwork:
    """A session-wide tiny model of our own (not the shared fixture: the searcher switches it to eval)."""
    return QNetwork.from_encoder(str(tiny_encoder_path))


@pytest.fixture(scope="session")
def tiny_searcher(adapter_qnet: QNetwork) -> MultiHopSearcher:
    return MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, TEXTS, metadatas=[{"n": i} for i in range(12)]))
