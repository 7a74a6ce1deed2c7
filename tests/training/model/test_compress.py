"""A full fine-tune re-expressed as low-rank adapters: exact when the change is low-rank, truncated by the SVD."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from qrag.training.model.compress import LINEAR_TARGETS, low_rank_adapters
from qrag.training.model.qnet import QNetwork
from qrag.training.search.settings import HopSettings
from tests.conftest import make_tiny_encoder

CHUNKS = ["Mary went to the kitchen.", "Mary took the milk there.", "The grass is green."]
QUESTION = ["Where is the milk?"]


def vectors(qnet: QNetwork) -> torch.Tensor:
    """The state vector and the chunk vectors, stacked (4, D)."""
    with torch.no_grad():
        return torch.cat((qnet.embed_states(QUESTION, [["Mary took the milk there."]]), qnet.embed_chunks(CHUNKS)))


def orthonormal(n: int, k: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)))
    return q  # (n, k)


def fine_tuned(encoder: Path, towers: str = "state") -> QNetwork:
    """A full fine-tune whose every linear weight changed by an exact rank-2 matrix, nothing else changed."""
    qnet = QNetwork.from_encoder(str(encoder), train_mode="full", train_towers=towers)
    trained = [qnet.state_tower] + ([qnet.chunk_tower] if towers == "both" else [])
    with torch.no_grad():
        for t, tower in enumerate(trained):
            for i, module in enumerate(tower.encoder.modules()):
                if isinstance(module, torch.nn.Linear):
                    out, inp = module.weight.shape
                    u, v = orthonormal(out, 2, 10 * t + i), orthonormal(inp, 2, 100 + 10 * t + i)
                    module.weight.add_(3.0 * u[:, :1] @ v[:, :1].T + 1.0 * u[:, 1:] @ v[:, 1:].T)
    return qnet


@pytest.mark.parametrize("towers", ["state", "both"])
def test_a_low_rank_change_is_kept_exactly_and_survives_a_checkpoint(tiny_encoder_path: Path, tmp_path: Path,
                                                                     towers: str) -> None:
    trained = fine_tuned(tiny_encoder_path, towers)
    trained.hop_settings = HopSettings(max_hops=3, stop_threshold=0.125, calibrated=True)  # as the trainer leaves it
    base = QNetwork.from_encoder(str(tiny_encoder_path))
    changed = (vectors(trained) - vectors(base)).norm(dim=1) / vectors(base).norm(dim=1)
    assert changed[0] > 0.05 and (changed[1:] > 0.05).tolist() == [towers == "both"] * 3  # so the test can fail
    small, report = low_rank_adapters(trained, rank=2)
    assert small.config.train_mode == "lora" and small.config.lora_target_modules == list(LINEAR_TARGETS)
    assert small.config.train_towers == towers
    per_tower = 6 * 2  # query, key, value, attention output, intermediate, output; two layers
    assert report.matrices == per_tower * (2 if towers == "both" else 1)
    assert report.min_energy_kept == pytest.approx(1.0) and report.dropped_fraction == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(vectors(small), vectors(trained), atol=1e-5, rtol=1e-4)
    small.save_pretrained(tmp_path / "adapters")
    loaded = QNetwork.from_pretrained(tmp_path / "adapters")
    torch.testing.assert_close(vectors(loaded), vectors(trained), atol=1e-5, rtol=1e-4)
    assert small.hop_settings == loaded.hop_settings == trained.hop_settings  # the calibrated stop rule travels with the weights


def test_truncation_keeps_the_top_singular_direction_and_reports_what_it_lost(tiny_encoder_path: Path) -> None:
    trained = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="full", train_towers="state")
    query = trained.state_tower.encoder.encoder.layer[0].attention.self.query
    ln_bias = trained.state_tower.encoder.encoder.layer[1].output.LayerNorm.bias
    u, v = orthonormal(32, 2, 0), orthonormal(32, 2, 1)
    top = 3.0 * u[:, :1] @ v[:, :1].T
    with torch.no_grad():
        query.weight.add_(top + 1.0 * u[:, 1:] @ v[:, 1:].T)  # singular values 3 and 1
        ln_bias.add_(torch.full_like(ln_bias, 4.0 / math.sqrt(32)))  # a change of norm 4 outside any linear weight
    small, report = low_rank_adapters(trained, rank=1)
    assert report.min_energy_kept == pytest.approx(9 / 10)  # 3² of 3² + 1²
    assert report.dropped_fraction == pytest.approx(4 / math.sqrt(9 + 1 + 16))
    assert report.adapter_parameters == 2 * (4 * (32 + 32) + 2 * (32 + 64))  # rank 1: in + out per weight, 2 layers
    adapted = small.state_tower.encoder.base_model.model.encoder.layer[0].attention.self.query
    delta = adapted.lora_B["default"].weight @ adapted.lora_A["default"].weight * adapted.scaling["default"]
    torch.testing.assert_close(delta, top, atol=1e-5, rtol=1e-4)
    base = QNetwork.from_encoder(str(tiny_encoder_path))
    untouched = small.state_tower.encoder.base_model.model.encoder.layer[1].output.LayerNorm.bias
    torch.testing.assert_close(untouched, base.state_tower.encoder.encoder.layer[1].output.LayerNorm.bias)


def test_refuses_what_it_cannot_compress(tiny_encoder_path: Path, tmp_path: Path) -> None:
    lora = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="lora", lora_rank=4)
    with pytest.raises(ValueError, match="needs a full fine-tune.*train_mode='lora'"):
        low_rank_adapters(lora, rank=4)
    trained = fine_tuned(tiny_encoder_path)
    for rank in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="rank must be a positive integer"):
            low_rank_adapters(trained, rank=rank)  # type: ignore[arg-type]
    other = make_tiny_encoder(tmp_path / "other", seed=1)
    with pytest.raises(ValueError, match="not the one this network was trained from"):
        low_rank_adapters(trained, rank=2, base=str(other))
