"""The checkpoint shipped inside qrag loads offline by name and retrieves a bAbI-style chain."""

from __future__ import annotations

import pytest

from training.encoders import BUNDLED_MINILM
from training.qnet import CheckpointError, QNetwork
from training.search import load_model
from training.shipped import shipped_names, shipped_path

NAME = "qrag/babilong-minilm"
STORY = ["Mary went to the kitchen.", "Mary took the milk there.", "John went to the garden.",
         "Mary travelled to the office.", "The grass is green."]


def test_shipped_checkpoint_is_listed_and_small() -> None:
    assert NAME in shipped_names()
    folder = shipped_path(NAME)
    assert folder is not None and (folder / "MODEL_CARD.md").is_file()
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size < 4 * 2**20  # adapters + tokenizer beside the bundled base, not a copy of the encoder


def test_shipped_checkpoint_loads_by_name_and_hops_through_the_story() -> None:
    qnet = QNetwork.from_pretrained(NAME)
    assert qnet.config.encoder == BUNDLED_MINILM and qnet.config.train_mode == "lora"
    assert load_model(NAME).trainable_state_dict().keys() == qnet.trainable_state_dict().keys()
    from qrag_integrations import QRAGRetriever

    docs = QRAGRetriever.from_texts(STORY, model=qnet).invoke("Where is the milk?")  # the stop rule decides
    texts = [d.page_content for d in docs]
    assert texts[0] == "Mary took the milk there."  # hop 1: who has the milk
    assert "Mary travelled to the office." in texts  # a later hop: where she went
    assert "The grass is green." not in texts and "John went to the garden." not in texts
    assert all(d.metadata["q_value"] >= 0.5 for d in docs)


def test_unknown_name_lists_what_ships() -> None:
    assert shipped_path("qrag/no-such-model") is None and shipped_path("babilong-minilm") is None
    with pytest.raises(CheckpointError, match="shipped with qrag: qrag/babilong-minilm"):
        QNetwork.from_pretrained("qrag/no-such-model")
