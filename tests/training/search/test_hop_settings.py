"""Hop settings travel with the model: saved in the checkpoint, the default of every search, overridable."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from qrag.training.learn.trainer import Trainer
from qrag.training.model.qnet import CheckpointError, QNetwork
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, SearchError, load_model, search_many
from qrag.training.search.settings import HopSettings
from tests.training.learn.test_trainer import small_config
from tests.training.learn.two_hop import make_two_hop_episodes

TEXTS = ["Mary went to the kitchen.", "Mary took the milk there.", "John went to the garden.",
         "Mary travelled to the office.", "The grass is green.", "Sandra moved to the hallway."]


def test_hops_round_trip_through_a_checkpoint(tiny_qnet: QNetwork, tmp_path: Path) -> None:
    tiny_qnet.hop_settings = HopSettings(max_hops=3, stop_threshold=0.125, calibrated=True, lexical_weight=0.3,
                                         pair_weight=0.5)
    loaded = QNetwork.from_pretrained(tiny_qnet.save_pretrained(tmp_path / "m"))
    assert loaded.hop_settings == HopSettings(max_hops=3, stop_threshold=0.125, calibrated=True, lexical_weight=0.3,
                                              pair_weight=0.5)


def test_the_old_attribute_name_still_reads_and_writes_the_hop_settings(tiny_qnet: QNetwork) -> None:
    with pytest.warns(FutureWarning, match="hop_settings"):
        assert tiny_qnet.hops is tiny_qnet.hop_settings
    with pytest.warns(FutureWarning, match="hop_settings"):
        tiny_qnet.hops = HopSettings(max_hops=2)
    assert tiny_qnet.hop_settings == HopSettings(max_hops=2)


def test_checkpoint_without_hops_gets_the_defaults_and_a_bad_section_is_named(tiny_qnet: QNetwork, tmp_path: Path) -> None:
    folder = tiny_qnet.save_pretrained(tmp_path / "m")
    meta_path = folder / "qrag_config.json"
    meta = json.loads(meta_path.read_text())
    del meta["hops"]  # as written before hop settings were stored
    meta_path.write_text(json.dumps(meta))
    assert QNetwork.from_pretrained(folder).hop_settings == HopSettings()
    for bad in ({"max_hops": 0}, {"max_hops": "4"}, {"stop_threshold": "0.5"}, {"hops": 3}, [4, 0.5]):
        meta["hops"] = bad
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(CheckpointError, match="'hops' section is invalid"):
            QNetwork.from_pretrained(folder)


def _searcher(qnet: QNetwork) -> MultiHopSearcher:
    return MultiHopSearcher(qnet, ChunkIndex.from_texts(qnet, TEXTS))


def test_search_uses_the_models_horizon_and_threshold_unless_overridden(tiny_qnet: QNetwork) -> None:
    searcher = _searcher(tiny_qnet)
    q = "Where is the milk?"
    tiny_qnet.hop_settings = HopSettings(max_hops=3, stop_threshold=None)
    assert len(searcher.search_one(q, k=None).hits) == 3  # no stop rule: the trained horizon
    assert len(searcher.search_one(q, k=None, max_hops=5).hits) == 5  # an explicit value wins
    tiny_qnet.hop_settings = HopSettings(max_hops=3, stop_threshold=1e9)  # every Q is below: stop after min_hops
    assert len(searcher.search_one(q, k=None).hits) == 1
    assert len(searcher.search_one(q, k=None, stop_threshold=None).hits) == 3
    assert len(searcher.search_one(q, k=None, stop_threshold=-1e9).hits) == 3
    tiny_qnet.hop_settings = HopSettings(max_hops=2, stop_threshold=None)
    # Batched evaluation resolves the same way.
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS)
    assert [len(r.hits) for r in search_many(tiny_qnet, [q, q], [index, index], SearchConfig(k=None))] == [2, 2]
    with pytest.raises(SearchError, match="stop_threshold must be"):
        searcher.search_one(q, stop_threshold="half")


def test_retriever_from_a_trained_folder_uses_its_horizon_and_stop_rule(tiny_qnet: QNetwork, tmp_path: Path) -> None:
    pytest.importorskip("langchain_core")
    from qrag import QRAGRetriever

    tiny_qnet.hop_settings = HopSettings(max_hops=2, stop_threshold=None)
    folder = tiny_qnet.save_pretrained(tmp_path / "m")
    adaptive = QRAGRetriever.from_texts(TEXTS, model=folder, k=None)
    assert len(adaptive.invoke("Where is the milk?")) == 2
    assert len(adaptive.invoke("Where is the milk?", max_hops=4)) == 4
    assert len(QRAGRetriever.from_texts(TEXTS, model=folder).invoke("Where is the milk?")) == 4  # default k=4
    tiny_qnet.hop_settings = HopSettings(max_hops=2, stop_threshold=1e9)
    strict = QRAGRetriever.from_texts(TEXTS, model=tiny_qnet.save_pretrained(tmp_path / "s"), k=None)
    assert len(strict.invoke("Where is the milk?")) == 1


def test_training_saves_its_horizon_with_every_checkpoint(tiny_encoder_path: Path, tmp_path: Path) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, total_transitions=8)
    cfg.env.max_hops = 3
    Trainer(cfg, make_two_hop_episodes(20, 0), make_two_hop_episodes(4, 1)).train()
    for folder in (tmp_path / "best", tmp_path / "last" / "model"):
        assert QNetwork.from_pretrained(folder).hop_settings.max_hops == 3


def test_untrained_model_is_saved_by_name_and_a_trained_one_in_full(tmp_path: Path, tiny_encoder_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path))
    assert qnet.untrained
    folder = qnet.save_pretrained(tmp_path / "named")
    assert json.loads((folder / "qrag_config.json").read_text())["saved_params"] == "none"
    assert (folder / "model.safetensors").stat().st_size < 1_000  # no weights, only the base's name
    loaded = QNetwork.from_pretrained(folder)
    chunks, states = loaded.embed_chunks(TEXTS), loaded.embed_states(["Where is the milk?"], [[]])
    torch.testing.assert_close(loaded.score(states, chunks),
                               qnet.score(qnet.embed_states(["Where is the milk?"], [[]]), qnet.embed_chunks(TEXTS)))
    with torch.no_grad():
        next(qnet.state_tower.parameters()).add_(1e-3)  # one trained weight: now the weights must be saved
    assert not qnet.untrained
    full = qnet.save_pretrained(tmp_path / "full")
    assert json.loads((full / "qrag_config.json").read_text())["saved_params"] == "all"


def test_plain_loads_are_quiet(capfd: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model("qrag/babilong-minilm")
        load_model("all-MiniLM-L6-v2")
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err
    assert not [w for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))
                and "qrag" not in str(w.filename)], [str(w.message) for w in caught]


def test_the_horizon_has_one_name_and_the_old_one_still_reads(tmp_path: Path) -> None:
    from qrag.training.learn.cli.train import parse_config
    from qrag.training.learn.config import ConfigError, TrainConfig, load_yaml

    old = tmp_path / "old.yaml"
    old.write_text("env:\n  max_steps: 3\n", encoding="utf-8")
    with pytest.warns(FutureWarning, match="'max_steps' is now 'max_hops'"):
        assert load_yaml(old).env.max_hops == 3
    with pytest.raises(ConfigError, match="keep only 'max_hops'"):
        TrainConfig.from_dict({"env": {"max_steps": 3, "max_hops": 2}})
    for flag in (["--env.max_steps", "5"], ["--env.max-steps=5"]):
        with pytest.warns(FutureWarning, match="--env.max_hops"):
            assert parse_config(flag).env.max_hops == 5
    assert parse_config(["--env.max_hops", "2"]).env.max_hops == 2
    assert "max_steps" not in TrainConfig().to_dict()["env"]
