"""`build_episodes`: training and validation episodes for a `DataConfig` (qrag.training.data.build)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qrag.training.data import build_episodes as lazily_exported
from qrag.training.data import load_episodes, write_jsonl
from qrag.training.data.build import MAX_HELD_OUT_SHARE, VALIDATION_SEED_OFFSET, build_episodes
from qrag.training.data.config import DataConfig
from qrag.training.overlay import ConfigError
from tests.training.learn.two_hop import make_two_hop_episodes


def test_package_exports_the_same_function() -> None:
    assert lazily_exported is build_episodes


def test_generated_tasks_are_split_evenly_and_validation_uses_a_disjoint_seed() -> None:
    data = DataConfig(source="babi", task="qa1, qa2", num_train=6, num_val=4, seed=3)
    train, val = build_episodes(data)
    assert [e.metadata["task"] for e in train] == ["qa1"] * 3 + ["qa2"] * 3
    assert [e.metadata["task"] for e in val] == ["qa1"] * 2 + ["qa2"] * 2
    expected_val = load_episodes("babi", task="qa2", split="train", num_samples=2, seed=3 + VALIDATION_SEED_OFFSET,
                                 num_sentences=data.num_sentences)
    assert val[2:] == expected_val
    assert train[3:] == load_episodes("babi", task="qa2", split="train", num_samples=3, seed=3,
                                      num_sentences=data.num_sentences)
    assert not {(e.question, e.chunks) for e in train} & {(e.question, e.chunks) for e in val}


def test_a_file_with_a_generating_source_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    write_jsonl(make_two_hop_episodes(4, 0), path)
    with pytest.raises(ConfigError, match=r"data.source='babilong' generates its own episodes.*--data.source jsonl"):
        build_episodes(DataConfig(source="babilong", train_path=str(path)))
    with pytest.raises(ConfigError, match="unknown data.source 'nope'"):
        build_episodes(DataConfig(source="nope"))
    with pytest.raises(ConfigError, match="--data.train_path FILE"):
        build_episodes(DataConfig(source="jsonl", task=None))


def test_held_out_share_of_a_file_is_capped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    episodes = make_two_hop_episodes(30, 0)
    path = tmp_path / "qa.jsonl"
    write_jsonl(episodes, path)
    train, val = build_episodes(DataConfig(source="jsonl", task=None, train_path=str(path), num_val=50, num_train=0))
    assert len(val) == int(30 * MAX_HELD_OUT_SHARE) == 6 and len(train) == 24
    assert sorted(e.question + "|".join(e.chunks) for e in train + val) == sorted(
        e.question + "|".join(e.chunks) for e in episodes)
    assert "holding out 6 for validation" in capsys.readouterr().err
    train, val = build_episodes(DataConfig(source="jsonl", task=None, train_path=str(path), num_val=2, num_train=0))
    assert len(val) == 2 and len(train) == 28
    with pytest.raises(ConfigError, match="training needs at least 2"):
        one = tmp_path / "one.jsonl"
        write_jsonl(episodes[:1], one)
        build_episodes(DataConfig(source="jsonl", task=None, train_path=str(one), num_val=1, num_train=0))


def test_a_validation_file_is_read_instead_of_holding_out(tmp_path: Path) -> None:
    train_path, val_path = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    write_jsonl(make_two_hop_episodes(10, 0), train_path)
    write_jsonl(make_two_hop_episodes(3, 1), val_path)
    train, val = build_episodes(DataConfig(source="jsonl", task=None, train_path=str(train_path),
                                           val_path=str(val_path), num_val=0, num_train=0))
    assert len(train) == 10 and val == load_episodes("jsonl", path=str(val_path))
