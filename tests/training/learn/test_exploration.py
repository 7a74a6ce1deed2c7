"""Exploration finds a first hop that the untrained model ranks below a lure; greedy acting never does.

The two-hop task ("where is the cup?" → "bob has the cup." → "bob is at the park.") with a lure chunk
"the cup." that a random tiny BERT ranks first at hop 1 in 98 % of episodes, and two hops to find both
facts. At METHOD.md's scale the untrained Q-values sit below the reward, so a greedy learner keeps
taking the lure, never completes an episode and never sees a reward; the same run with a uniform warm-up
and ε over the top-k completes episodes, learns to skip the lure and finds the chain held out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qrag.training.learn.config import EnvConfig
from qrag.training.learn.evaluation import evaluate
from qrag.training.learn.trainer import Trainer
from qrag.training.model.qnet import QNetwork
from tests.conftest import make_tiny_encoder
from tests.training.learn.two_hop import exploration_config, make_two_hop_episodes, with_lure


@pytest.fixture(scope="module")
def encoder_64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny-64-explore"), hidden=64, layers=2, seed=0)


@torch.no_grad()
def lure_first(qnet: QNetwork, episodes: list) -> float:
    """Share of episodes whose greedy first hop is the lure."""
    hits = 0
    for ep in episodes:
        q = qnet.score(qnet.embed_states([ep.question], [[]]), qnet.embed_chunks(list(ep.chunks)).unsqueeze(0), None)
        hits += ep.chunks[int(q[0].argmax())].count(" ") == 1  # "the cup." is the only two-word chunk
    return hits / len(episodes)


@pytest.mark.slow  # training runs: run by .ci/run (`pytest -m slow`)
def test_exploration_finds_the_chain_that_greedy_acting_misses(encoder_64: Path, tmp_path: Path) -> None:
    train, val = with_lure(make_two_hop_episodes(1000, seed=0), 0), with_lure(make_two_hop_episodes(50, seed=1), 1)
    test = with_lure(make_two_hop_episodes(200, seed=2), 2)
    env = EnvConfig(max_hops=2)
    results = {}
    for explore in (False, True):
        cfg = exploration_config(str(encoder_64), str(tmp_path / f"explore-{explore}"), explore)
        qnet = QNetwork.from_config(cfg.model)
        if not explore:
            assert lure_first(qnet, test) >= 0.9  # the untrained ranking the test is about
        Trainer(cfg, train, val, qnet=qnet).train()
        trained = QNetwork.from_pretrained(tmp_path / f"explore-{explore}" / "best")
        results[explore] = (evaluate(trained, test, env)["fact_em"], lure_first(trained, test))
    (greedy_em, greedy_lure), (explore_em, explore_lure) = results[False], results[True]
    assert greedy_em == 0.0 and greedy_lure >= 0.9, results
    assert explore_em >= 0.2 and explore_lure <= 0.5, results


@pytest.mark.slow  # training runs: run by .ci/run (`pytest -m slow`)
def test_the_margin_on_the_supporting_facts_finds_the_chain_with_greedy_acting(encoder_64: Path, tmp_path: Path) -> None:
    """The same greedy run as above, plus DQfD's large-margin loss with the supporting facts as the demonstrator:
    every visited state says which chunks complete the chain, so the lure is pushed below them without any
    exploration (docs/LEARNER.md, "Supervision from the supporting facts")."""
    train, val = with_lure(make_two_hop_episodes(1000, seed=0), 0), with_lure(make_two_hop_episodes(50, seed=1), 1)
    test = with_lure(make_two_hop_episodes(200, seed=2), 2)
    cfg = exploration_config(str(encoder_64), str(tmp_path / "margin"), explore=False, margin_weight=5.0)
    Trainer(cfg, train, val).train()
    trained = QNetwork.from_pretrained(tmp_path / "margin" / "best")
    em, lure = evaluate(trained, test, EnvConfig(max_hops=2))["fact_em"], lure_first(trained, test)
    assert em >= 0.4 and lure <= 0.1, (em, lure)  # greedy without it: EM 0, lure first in >= 90 %
