"""Length groups: the least padded area, exactly; and an update in groups equals the one-batch update."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
import torch

from qrag.training.learn.batching import length_groups, take_rows
from qrag.training.learn.trainer import Trainer
from tests.training.learn.test_trainer import small_config
from tests.training.learn.two_hop import make_two_hop_episodes


def _area(lengths: list[int], groups: list[list[int]]) -> int:
    return sum(len(g) * max(lengths[i] for i in g) for g in groups)


def test_hand_computed_groups() -> None:
    assert length_groups([10, 50, 12, 48], 2) == [[0, 2], [3, 1]]  # area 2·12 + 2·50 = 124 (one group: 200)
    assert length_groups([10, 50, 12, 48], 1) == [[0, 2, 3, 1]]
    assert length_groups([5, 5, 5], 3) == [[0, 1, 2]]  # splitting equal rows saves nothing: one group
    assert length_groups([3, 1], 8) == [[1], [0]]  # never more groups than rows
    assert length_groups([], 4) == []
    with pytest.raises(ValueError, match="max_groups"):
        length_groups([1], 0)


def test_groups_reach_the_least_area_of_every_partition() -> None:
    rng = random.Random(0)
    for _ in range(40):
        lengths = [rng.randint(1, 60) for _ in range(rng.randint(1, 7))]
        for g in (1, 2, 3):
            groups = length_groups(lengths, g)
            assert sorted(i for grp in groups for i in grp) == list(range(len(lengths))) and len(groups) <= g
            order = sorted(range(len(lengths)), key=lambda i: lengths[i])
            best = min(_area(lengths, [order[a:b] for a, b in itertools.pairwise((0, *cuts, len(order)))])
                       for k in range(min(g, len(lengths)))
                       for cuts in itertools.combinations(range(1, len(order)), k))
            assert _area(lengths, groups) == best  # contiguous cuts of the sorted rows hold an optimum


def test_take_rows_cuts_columns_that_are_padding_in_every_kept_row() -> None:
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0], [7, 0, 0, 0]])
    inputs = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    got = take_rows(inputs, [2, 1])
    assert got["input_ids"].tolist() == [[7, 0], [5, 6]] and got["attention_mask"].tolist() == [[1, 0], [1, 1]]


def test_an_update_in_length_groups_equals_the_one_batch_update(tiny_encoder_path: Path, tmp_path: Path) -> None:
    def trainer(groups: int, out: str) -> Trainer:
        cfg = small_config(tiny_encoder_path, tmp_path / out, minibatch_size=8, length_groups=groups)
        t = Trainer(cfg, make_two_hop_episodes(20, 0))
        for m in t.online.modules():  # dropout draws differ with the batch shape; the math must not
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        return t

    one, grouped = trainer(1, "one"), trainer(4, "grouped")
    batch = one.collect_rollout()
    lengths = one.online.tokenize_states(batch["questions"], batch["rendered"])["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1  # states of several lengths: the groups are real
    stats_one, stats_grouped = one.update(batch), grouped.update(batch)
    assert stats_grouped["losses/td_loss"] == pytest.approx(stats_one["losses/td_loss"], rel=1e-5)
    assert stats_grouped["losses/q_values"] == pytest.approx(stats_one["losses/q_values"], rel=1e-5)
    for (name, a), b in zip(one.online.state_dict().items(), grouped.online.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("anchor", ["first_hop", "passages"])
def test_first_hop_rows_left_out_of_the_update_change_nothing(tiny_encoder_path: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, anchor: str) -> None:
    """With the first-hop or passages anchor a bare question's loss has no gradient, so leaving those rows out
    of the update's passes gives the same parameters as encoding every row."""
    def trainer(out: str) -> Trainer:
        cfg = small_config(tiny_encoder_path, tmp_path / out, minibatch_size=8)
        cfg.model.train_towers, cfg.model.state_anchor = "state", anchor  # type: ignore[assignment]
        cfg.rl.margin_weight = 1.0
        t = Trainer(cfg, make_two_hop_episodes(20, 0))
        for m in t.online.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        return t

    every, skipping = trainer("every"), trainer("skipping")
    batch = every.collect_rollout()
    assert any(not r for r in batch["rendered"]) and any(batch["rendered"])  # bare questions and later hops
    assert len(skipping.rows_with_gradient(batch, list(range(8)))) < 8
    monkeypatch.setattr(every, "rows_with_gradient", lambda batch, idx: idx)  # the reference encodes every row
    every.update(batch)
    skipping.update(batch)
    for (name, a), b in zip(every.online.state_dict().items(), skipping.online.state_dict().values(), strict=True):
        # AdamW divides by the gradient's own size, so a parameter whose gradient is ~0 moves by rounding noise
        # of up to ~1e-6 either way; a real difference would move it by the learning rate, 1e-3.
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5, msg=name)
    assert not torch.equal(every.online.state_dict()["state_tower.encoder.embeddings.word_embeddings.weight"],
                           trainer("fresh").online.state_dict()["state_tower.encoder.embeddings.word_embeddings.weight"])
