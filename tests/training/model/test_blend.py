"""A fine-tune blended with the network it started from: exact on LoRA adapters (each adapted weight's change is
the blend of the two changes, whatever their ranks and scales), linear on every other trained weight; networks
that cannot be blended are refused by name; `qrag-blend` writes one folder per weight, calibrated and scored
on the run's validation episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft.tuners.lora import LoraLayer

from qrag.training.data import build as build_module
from qrag.training.learn.cli.blend import main as blend_main
from qrag.training.learn.cli.blend import parse_weights
from qrag.training.learn.config import TrainConfig
from qrag.training.model.blend import blend_networks
from qrag.training.model.qnet import QNetwork
from qrag.training.search import neighbours as neighbours_module
from qrag.training.search.settings import HopSettings
from tests.conftest import make_tiny_encoder
from tests.training.learn.test_own_data import PASSAGES, QUESTIONS

STATES = (["who has the cup?", "where is dave?"], [["alice has the cup."], []])


def lora_net(encoder: Path, seed: int, rank: int = 4, alpha: float = 8.0, **options: object) -> QNetwork:
    """A LoRA network whose adapters are random (both factors nonzero, so every adapted weight has changed)."""
    qnet = QNetwork.from_encoder(str(encoder), train_mode="lora", lora_rank=rank, lora_alpha=alpha, **options)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in qnet.named_parameters():
            if "lora_" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return qnet.eval()


def deltas(qnet: QNetwork) -> dict[str, torch.Tensor]:
    """Each adapted weight's change, scale·B·A, by module name."""
    return {name: m.get_delta_weight("default") for name, m in qnet.state_tower.encoder.named_modules()
            if isinstance(m, LoraLayer)}


def states(qnet: QNetwork) -> torch.Tensor:
    with torch.no_grad():
        return qnet.embed_states(*STATES)


def test_a_lora_blend_changes_each_weight_by_the_blend_of_the_two_changes(tiny_encoder_path: Path) -> None:
    start = lora_net(tiny_encoder_path, seed=0, rank=2, alpha=2.0)  # scale 1
    tuned = lora_net(tiny_encoder_path, seed=1, rank=4, alpha=8.0)  # scale 2: the blend must weigh each by its own
    tuned.hop_settings = HopSettings(max_hops=3, stop_threshold=0.2, calibrated=True, lexical_weight=0.1)
    d0, d1 = deltas(start), deltas(tuned)
    assert len(d0) == 4  # query and value (the default targets) in each of the two layers
    blended = blend_networks(start, tuned, 0.3)
    assert blended.config.lora_rank == 6
    for name, d in deltas(blended).items():
        torch.testing.assert_close(d, 0.7 * d0[name] + 0.3 * d1[name], rtol=0, atol=1e-6)
    # The search settings are the fine-tune's; its threshold was calibrated for its own Q-values, not the blend's.
    assert blended.hop_settings == HopSettings(max_hops=3, stop_threshold=0.2, calibrated=False, lexical_weight=0.1)
    # At the ends the blend is each network; between them it is neither.
    torch.testing.assert_close(states(blend_networks(start, tuned, 0.0)), states(start), rtol=0, atol=1e-5)
    torch.testing.assert_close(states(blend_networks(start, tuned, 1.0)), states(tuned), rtol=0, atol=1e-5)
    middle = states(blended)
    assert (middle - states(start)).abs().max() > 1e-3 and (middle - states(tuned)).abs().max() > 1e-3


def test_a_blend_saves_and_loads_as_any_lora_network(tiny_encoder_path: Path, tmp_path: Path) -> None:
    blended = blend_networks(lora_net(tiny_encoder_path, 0), lora_net(tiny_encoder_path, 1), 0.5)
    loaded = QNetwork.from_pretrained(blended.save_pretrained(tmp_path / "b"))
    assert loaded.config.lora_rank == 8 and loaded.config.lora_alpha == 16.0
    torch.testing.assert_close(states(loaded), states(blended), rtol=0, atol=1e-6)


def test_a_full_fine_tune_is_blended_linearly(tiny_qnet: QNetwork) -> None:
    start = tiny_qnet
    tuned = QNetwork.from_config(start.config)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in tuned.state_tower.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
    blended = blend_networks(start, tuned, 0.25)
    mine, a, b = blended.state_dict(), start.state_dict(), tuned.state_dict()
    for key, value in mine.items():
        if value.is_floating_point():
            torch.testing.assert_close(value, 0.75 * a[key] + 0.25 * b[key], rtol=0, atol=1e-6)
    assert not blended.untrained


def test_what_cannot_be_blended_is_refused(tiny_encoder_path: Path, tmp_path: Path) -> None:
    start, tuned = lora_net(tiny_encoder_path, 0), lora_net(tiny_encoder_path, 1)
    for weight in (-0.1, 1.5, True, "0.5", float("nan")):
        with pytest.raises(ValueError, match=r"weight must be a number in \[0, 1\]"):
            blend_networks(start, tuned, weight)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"differ in model.max_chunk_tokens \(64 against 16\)"):
        blend_networks(start, lora_net(tiny_encoder_path, 1, max_chunk_tokens=16), 0.5)
    with pytest.raises(ValueError, match="merged for serving"):
        blend_networks(start, lora_net(tiny_encoder_path, 1).merge_adapters(), 0.5)
    other_base = make_tiny_encoder(tmp_path / "other", seed=1)
    with pytest.raises(ValueError, match="different base encoder weights"):
        blend_networks(start, lora_net(other_base, 1), 0.5)


def test_weights_are_parsed_and_checked() -> None:
    assert parse_weights("0.25, 0.5,1") == [0.25, 0.5, 1.0]
    for bad, message in (("0.5,x", "'x' is not a number"), ("1.2", "outside"), ("0.5,0.5", "names 0.5 twice"),
                         ("nan", "outside")):
        with pytest.raises(ValueError, match=message):
            parse_weights(bad)


@pytest.fixture()
def run(tmp_path: Path, tiny_encoder_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What `qrag-train --init` leaves: config.yaml (a corpus and its questions) and best/ naming its start."""
    monkeypatch.setattr(neighbours_module, "NEIGHBOUR_ENCODER", str(tiny_encoder_path))
    corpus, questions = tmp_path / "corpus.jsonl", tmp_path / "qa.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in PASSAGES), encoding="utf-8")
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    start = lora_net(tiny_encoder_path, 0)
    start.hop_settings = HopSettings(max_hops=2, stop_threshold=0.3, calibrated=True)
    start_dir = start.save_pretrained(tmp_path / "start")
    tuned = lora_net(tiny_encoder_path, 1, init=str(start_dir))
    tuned.hop_settings = HopSettings(max_hops=2, stop_threshold=0.9, calibrated=True)
    folder = tmp_path / "ft"
    tuned.save_pretrained(folder / "best")
    config = TrainConfig()
    config.model = tuned.config
    config.data.source, config.data.corpus, config.data.train_path = "corpus", str(corpus), str(questions)
    config.data.num_val, config.data.num_distractors, config.env.max_hops = 2, 3, 2
    config.data.rehearse = "babilong:qa1"  # rehearsal adds training episodes only: a blend never builds them
    monkeypatch.setattr(build_module, "rehearsal_episodes", lambda *a: pytest.fail("rehearsal built for a blend"))
    config.trainer.num_envs = 2
    config.to_yaml(folder / "config.yaml")
    return folder


def test_qrag_blend_writes_calibrates_and_scores_each_weight(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert blend_main([str(run), "--weights", "0.5,1"]) == 0, capsys.readouterr().err
    rows = json.loads(capsys.readouterr().out)
    assert [r["weight"] for r in rows] == [0.5, 1.0] and [r["folder"] for r in rows] == [
        str(run / "blend-0.5"), str(run / "blend-1")]
    for row in rows:
        saved = json.loads((Path(row["folder"]) / "eval.json").read_text())
        assert saved == row and 0.0 <= row["fact_recall"] <= 1.0 and "stop/threshold" in row and "sf_em" in row
        hops = QNetwork.from_pretrained(row["folder"]).hop_settings
        assert hops.calibrated and hops.stop_threshold == pytest.approx(row["stop/threshold"])
    # A blend keeps the lineage of the fine-tune (its start), and serves by its folder like any checkpoint.
    assert QNetwork.from_pretrained(run / "blend-1").config.init == str(run.parent / "start")
    from qrag.integrations import QRAGRetriever

    docs = QRAGRetriever.from_texts([t for _, t in PASSAGES], model=str(run / "blend-0.5"), k=2).invoke("who has the cup?")
    assert len(docs) == 2


def test_qrag_blend_refuses_bad_arguments(run: Path, tiny_encoder_path: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert blend_main([str(run), "--weights", "0.5,2"]) == 2
    assert "--weights '0.5,2': 2 is outside [0, 1]" in capsys.readouterr().err
    assert blend_main([str(tmp_path / "nowhere"), "--weights", "0.5"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    plain = lora_net(tiny_encoder_path, 2).save_pretrained(tmp_path / "plain")  # trained without --init
    assert blend_main([str(plain), "--weights", "0.5"]) == 2
    assert "names no network it started from" in capsys.readouterr().err
    # A checkpoint folder with --start: the blend is written beside it, its stop rule left uncalibrated.
    assert blend_main([str(plain), "--start", str(run.parent / "start"), "--weights", "0.5"]) == 0
    beside = QNetwork.from_pretrained(tmp_path / "blend-0.5")
    assert not beside.hop_settings.calibrated and beside.config.init == str(run.parent / "start")
    assert "stop rules are left uncalibrated" in capsys.readouterr().err
    assert blend_main([str(plain), "--start", str(tiny_encoder_path), "--weights", "0.5"]) == 2
    assert "qrag-blend: error:" in capsys.readouterr().err
    assert not any(run.glob("blend-*"))  # nothing written by the refusals
