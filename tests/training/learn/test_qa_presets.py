"""The HotpotQA, MuSiQue and 2Wiki presets train on the official files through the loaders."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from qrag.training.data.build import build_episodes
from qrag.training.learn.config import load_preset

FIXTURES = Path(__file__).parents[1] / "data" / "fixtures"


@pytest.mark.parametrize(("preset", "fixture"), [
    ("hotpotqa", "hotpot_dev_distractor.json"), ("musique", "musique_ans_v1.0_dev.jsonl"), ("2wiki", "2wiki_dev.json"),
])
def test_qa_preset_reads_the_official_file(preset: str, fixture: str) -> None:
    config = load_preset(preset).validate()
    assert config.model.position_mode == "none" and config.data.source == preset
    data = dataclasses.replace(config.data, train_path=str(FIXTURES / fixture), val_path=str(FIXTURES / fixture))
    train, val = build_episodes(data)
    assert train and val and all(ep.supporting for ep in train)
    assert all(ep.metadata["source"] == preset for ep in train)
