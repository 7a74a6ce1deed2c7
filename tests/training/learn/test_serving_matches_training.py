"""A model is served by the hops it was trained and validated with: the trainer's greedy evaluation and the
searcher's batched greedy search take the same chunks, so their fact EM is the same on the same episodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from qrag.training.learn.config import EnvConfig
from qrag.training.learn.evaluation import evaluate
from qrag.training.model.qnet import QNetwork
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import SearchConfig, search_many
from tests.training.learn.two_hop import make_two_hop_episodes


@pytest.mark.parametrize("mode,order,anchor", [  # one in the default suite, every variant in the slow one
    ("relative", "document", "none"), pytest.param("none", "selection", "none", marks=pytest.mark.slow),
    pytest.param("none", "selection", "first_hop", marks=pytest.mark.slow),
    pytest.param("none", "selection", "passages", marks=pytest.mark.slow)])
def test_trainer_evaluation_and_search_take_the_same_hops(tiny_encoder_path: Path, mode: str, order: str,
                                                          anchor: str) -> None:
    towers = "state" if anchor != "none" else "both"
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), position_mode=mode, state_order=order,
                                 train_towers=towers, state_anchor=anchor)
    episodes = make_two_hop_episodes(40, seed=3)
    for hops in (1, 2, 3):
        trained_view = evaluate(qnet, episodes, EnvConfig(max_hops=hops, never_terminate=True), num_envs=7)
        indexes = [ChunkIndex(qnet.embed_chunks(list(ep.chunks)), ep.chunks, encoder=qnet.config.encoder,
                              ordered=order == "document") for ep in episodes]
        found = search_many(qnet, [ep.question for ep in episodes], indexes,
                            SearchConfig(k=hops, max_hops=hops, stop_threshold=None, batch_size=5))
        taken = [{int(h.chunk.id) for h in r.hits} for r in found]
        served = sum(set(ep.supporting) <= t for ep, t in zip(episodes, taken, strict=True)) / len(episodes)
        recall = sum(len(set(ep.supporting) & t) / len(ep.supporting)
                     for ep, t in zip(episodes, taken, strict=True)) / len(episodes)
        assert served == trained_view["fact_em"], (hops, served, trained_view)
        assert recall == pytest.approx(trained_view["fact_recall"]), (hops, recall, trained_view)
        # Ending an episode once its facts are in (the training MDP) changes the steps, not what is found.
        ending = evaluate(qnet, episodes, EnvConfig(max_hops=hops), num_envs=7)
        assert ending["fact_em"] == served and ending["steps"] <= trained_view["steps"]
    assert 0 < trained_view["fact_em"] < 1  # some episodes found, some not: the comparison is not vacuous
