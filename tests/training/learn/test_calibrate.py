"""The stop rule's calibration: hand-computed choices, and the end-to-end call on a real (tiny) model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from qrag.training.learn.stop_calibration import calibrate_stop_threshold, choose_threshold
from qrag.training.model.qnet import QNetwork
from tests.training.learn.two_hop import make_two_hop_episodes


def test_threshold_cuts_where_the_gold_chain_ends() -> None:
    # Two 2-fact episodes: gold found in hops 0-1, the third hop is past the chain and its Q is low.
    hop_qs = [[0.9, 0.8, 0.1], [0.95, 0.7, 0.2]]
    rows = [[3, 5, 0], [1, 2, 4]]
    gold = [[3, 5], [1, 2]]
    threshold, s = choose_threshold(hop_qs, rows, gold)
    # Distinct Qs past hop 0: 0.1 0.2 0.7 0.8; the cut between 0.2 and 0.7 keeps exactly the chains.
    assert threshold == pytest.approx(0.45)
    assert s["fact_em"] == 1.0 and s["fact_f1"] == 1.0 and s["mean_hops"] == 2.0
    assert s["em_all_hops"] == 1.0 and s["f1_all_hops"] == pytest.approx(0.8)  # 2·2/(3+2)


def test_threshold_never_costs_coverage_beyond_the_tolerance() -> None:
    # Episode A needs its third hop, whose Q (0.3) is lower than B's and C's useless third hops (0.4, 0.5).
    hop_qs = [[0.9, 0.8, 0.3], [0.9, 0.8, 0.4], [0.9, 0.8, 0.5]]
    rows = [[0, 1, 2], [0, 1, 2], [0, 1, 2]]
    gold = [[0, 1, 2], [0, 1], [0, 1]]
    threshold, s = choose_threshold(hop_qs, rows, gold)
    assert threshold < 0.3  # any cut above 0.3 loses A's chain: EM 2/3 < 1.0 - 0.01
    assert s["fact_em"] == 1.0 and s["fact_f1"] == pytest.approx((1 + 0.8 + 0.8) / 3)
    # Allowed to give up a third of EM, the cut between 0.5 and 0.8 has the best F1: (0.8 + 1 + 1) / 3.
    lax, s_lax = choose_threshold(hop_qs, rows, gold, em_tolerance=0.5)
    assert lax == pytest.approx(0.65) and s_lax["fact_em"] == pytest.approx(2 / 3)
    assert s_lax["fact_f1"] == pytest.approx(2.8 / 3)


def test_min_hops_are_never_cut_and_bad_input_is_named() -> None:
    threshold, s = choose_threshold([[0.01, 0.9]], [[0, 1]], [[0, 1]], min_hops=1)
    assert s["fact_em"] == 1.0 and threshold < 0.9
    with pytest.raises(ValueError, match="same non-zero number"):
        choose_threshold([], [], [])
    with pytest.raises(ValueError, match="at least one supporting"):
        choose_threshold([[0.5]], [[0]], [[]])


def test_calibrating_a_model_on_its_validation_episodes(tiny_qnet: QNetwork) -> None:
    episodes = make_two_hop_episodes(12, 3)
    tiny_qnet.hop_settings = dataclasses.replace(tiny_qnet.hop_settings, max_hops=3)
    c = calibrate_stop_threshold(tiny_qnet, episodes)
    assert c.episodes == 12 and c.max_hops == 3
    assert c.fact_em >= c.em_all_hops - 0.01
    assert c.fact_f1 >= c.f1_all_hops  # the chosen cut is never worse than taking every hop
    assert 1.0 <= c.mean_hops <= 3.0
    # Stored with the model, the threshold survives a save and is what adaptive search uses.
    tiny_qnet.hop_settings = dataclasses.replace(tiny_qnet.hop_settings, stop_threshold=c.threshold, calibrated=True)
    with pytest.raises(ValueError, match="at least one validation episode"):
        calibrate_stop_threshold(tiny_qnet, [])


def test_calibrated_threshold_reproduces_its_scores_through_search(tiny_qnet: QNetwork, tmp_path: Path) -> None:
    from qrag.training.search.index import ChunkIndex
    from qrag.training.search.searcher import SearchConfig, search_many

    episodes = make_two_hop_episodes(10, 4)
    tiny_qnet.hop_settings = dataclasses.replace(tiny_qnet.hop_settings, max_hops=3)
    c = calibrate_stop_threshold(tiny_qnet, episodes)
    tiny_qnet.hop_settings = dataclasses.replace(tiny_qnet.hop_settings, stop_threshold=c.threshold, calibrated=True)
    loaded = QNetwork.from_pretrained(tiny_qnet.save_pretrained(tmp_path / "m"))
    indexes = [ChunkIndex.from_texts(loaded, ep.chunks) for ep in episodes]
    results = search_many(loaded, [ep.question for ep in episodes], indexes, SearchConfig(k=None))
    em = sum(set(ep.supporting) <= {int(h.chunk.id) for h in r.hits} for ep, r in zip(episodes, results, strict=True))
    assert em / len(episodes) == pytest.approx(c.fact_em)
    assert sum(len(r.hits) for r in results) / len(episodes) == pytest.approx(c.mean_hops)
