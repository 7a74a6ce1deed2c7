"""BabiLong haystacks over a fixed pool of background sentences (`filler_sentences`)."""

from __future__ import annotations

import pytest

from qrag.training.data.babilong import FILLER_RUN, filler_pool
from qrag.training.data.build import build_episodes
from qrag.training.data.config import DataConfig
from qrag.training.data.sources import load_episodes
from qrag.training.overlay import ConfigError


def test_a_pool_has_its_size_is_deterministic_and_the_splits_draw_apart() -> None:
    train, test = filler_pool(200, "train"), filler_pool(200, "test")
    assert len(train) == len(test) == 200
    filler_pool.cache_clear()
    assert filler_pool(200, "train") == train  # drawn again from scratch: the same sentences
    assert len(set(train) & set(test)) < 20  # runs from random places of ~3.5M tokens of text
    # runs of FILLER_RUN consecutive sentences, not one book read through
    assert 200 // FILLER_RUN <= len({s for s in train[::FILLER_RUN]})


def test_haystacks_take_their_background_from_the_pool_only() -> None:
    pool = set(filler_pool(300, "test"))
    episodes = load_episodes("babilong", task="qa2", split="test", num_samples=6, num_sentences=120,
                             filler_sentences=300)
    for ep in episodes:
        facts = {ep.chunks[i] for i in ep.supporting}
        background = [c for c in ep.chunks if c not in pool]
        assert facts <= set(background)  # only the story's own sentences come from elsewhere
        assert len(background) <= 40 and ep.num_chunks == 120
    corpus = {c for ep in episodes for c in ep.chunks}
    assert len(corpus & pool) <= 300
    plain = load_episodes("babilong", task="qa2", split="test", num_samples=6, num_sentences=120)
    assert [ep.question for ep in plain] == [ep.question for ep in episodes]  # the same samples, other filler


def test_training_and_validation_share_the_train_pool() -> None:
    data = DataConfig(source="babilong", task="qa1", num_sentences=60, num_train=4, num_val=2, filler_sentences=150)
    train, val = build_episodes(data)
    pool = set(filler_pool(150, "train"))
    for ep in (*train, *val):
        assert sum(c in pool for c in ep.chunks) >= ep.num_chunks - 20


def test_bad_values_are_named() -> None:
    with pytest.raises(ConfigError, match="data.filler_sentences must be >= 1, got 0"):
        DataConfig(source="babilong", filler_sentences=0).validate()
    with pytest.raises(ConfigError, match="applies to the babilong source only, not 'babi'"):
        DataConfig(source="babi", filler_sentences=10).validate()
    with pytest.raises(ValueError, match="filler_sentences must be >= 1, got -3"):
        filler_pool(-3, "train")
    with pytest.raises(ValueError, match="background or filler_sentences, not both"):
        load_episodes("babilong", task="qa1", num_samples=1, num_sentences=60, filler_sentences=10,
                      background=["A sentence."])
