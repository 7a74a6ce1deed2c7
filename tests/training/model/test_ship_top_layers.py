"""Shipping a top-layer fine-tune (`scripts/ship_checkpoint.py --top-layers N`): the top N layers travel exactly, as a
'top_layers' checkpoint on the bundled MiniLM, and a fine-tune whose lower layers moved too is refused by name."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from qrag.training.model.encoders import BUNDLED_MINILM
from qrag.training.model.qnet import QNetwork
from qrag.training.model.trunk import layers_of
from tests.scripts import load_script


def _script() -> ModuleType:
    return load_script("ship_checkpoint")


def _fine_tune(layers: list[int]) -> QNetwork:
    net = QNetwork.from_encoder(BUNDLED_MINILM, train_towers="state", state_anchor="question", normalize=True,
                                scale=1.0, max_chunk_tokens=256).eval()
    found = layers_of(net.state_tower.encoder)
    assert found is not None
    torch.manual_seed(0)
    with torch.no_grad():
        for i in layers:
            for p in found[1][i].parameters():
                p.add_(0.01 * torch.randn_like(p))
    return net


def test_the_top_layers_ship_exactly_and_share_the_trunk(tmp_path: Path) -> None:
    trained = _fine_tune([4, 5])
    shipped = _script().top_layers(trained, 2)
    assert shipped.config.train_mode == "top_layers" and shipped.config.trainable_layers == 2
    folder = shipped.save_pretrained(tmp_path / "m")
    loaded = QNetwork.from_pretrained(folder).eval().requires_grad_(False)
    states = loaded.tokenize_states(["Who wrote the first program?"], [["Ada Lovelace wrote it in 1843."]])
    with torch.no_grad():
        torch.testing.assert_close(loaded.state_vectors(states), trained.state_vectors(states), atol=1e-6, rtol=0)
    assert loaded._shared_layers(loaded.state_tower, loaded.chunk_tower) == 4  # the four layers below are the base's
    size = sum(f.stat().st_size for f in folder.rglob("*.safetensors"))
    assert size < 20 * 2**20  # two layers' weights, not a whole tower


def test_a_fine_tune_whose_lower_layers_moved_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"layer\.3\..* differs from the bundled encoder's: more than the top 2 layers"):
        _script().top_layers(_fine_tune([3, 4, 5]), 2)
