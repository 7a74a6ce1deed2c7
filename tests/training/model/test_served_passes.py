"""Served state passes at their floor (`anchors.served_states`, `QNetwork.frozen_questions`): the vectors of the full
anchored expressions, with a bare question's cancelling terms not encoded and `f_0(q)` encoded once per question."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qrag.training.model.qnet import QNetwork
from qrag.training.model.trunk import layers_of

QUESTIONS = ["Where is the milk?", "Where is the apple?", "Where is Daniel?"]
TAKEN = [["Mary took the milk there.", "Mary went to the kitchen."], ["John picked up the apple."], []]
MODES = ["none", "question", "first_hop", "passages"]


def trained(path: Path, mode: str) -> QNetwork:
    """A network whose state tower differs from its frozen base (as after training), under anchor `mode`."""
    qnet = QNetwork.from_encoder(str(path), train_towers="state", state_anchor=mode)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in qnet.state_tower.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return qnet.eval()


def count_passes(qnet: QNetwork) -> dict[str, int]:
    """Encoder passes per tower, counted at their embeddings."""
    counts = {"state": 0, "base": 0}
    for name, tower in (("state", qnet.state_tower), ("base", qnet.chunk_tower)):
        found = layers_of(tower.encoder)
        assert found is not None
        found[0].register_forward_hook(lambda *_, n=name: counts.__setitem__(n, counts[n] + 1))
    return counts


@pytest.mark.parametrize("mode", MODES)
def test_served_vectors_are_the_anchored_expressions(tiny_encoder_path: Path, mode: str) -> None:
    qnet = trained(tiny_encoder_path, mode)
    full = qnet.state_vectors(qnet.tokenize_states(QUESTIONS, TAKEN))  # the expressions as training computes them
    torch.testing.assert_close(qnet.embed_states(QUESTIONS, TAKEN), full, atol=1e-5, rtol=0)
    torch.testing.assert_close(qnet.embed_states(QUESTIONS, TAKEN), full, atol=1e-5, rtol=0)  # f_0(q) kept


def test_a_search_encodes_each_question_once_and_skips_what_cancels(tiny_encoder_path: Path) -> None:
    qnet = trained(tiny_encoder_path, "question")
    counts = count_passes(qnet)
    qnet.embed_states(QUESTIONS[:1], [[]])  # hop 1: s = q, the anchor f_0(q) − f_0(s) is zero
    assert counts == {"state": 1, "base": 0}
    qnet.embed_states(QUESTIONS[:1], [TAKEN[0][:1]])  # hop 2: f_θ(s), f_0(s), and f_0(q) once
    assert counts == {"state": 2, "base": 2}
    qnet.embed_states(QUESTIONS[:1], [TAKEN[0]])  # hop 3: f_0(q) is kept
    assert counts == {"state": 3, "base": 3}


def test_kept_question_vectors_follow_the_base_weights(tiny_encoder_path: Path) -> None:
    qnet = trained(tiny_encoder_path, "passages")
    before = qnet.embed_states(QUESTIONS[:1], [[]])
    qnet.chunk_tower.load_state_dict({k: v + 0.01 for k, v in qnet.chunk_tower.state_dict().items()})
    after = qnet.embed_states(QUESTIONS[:1], [[]])  # the bare question is f_0(q) itself: it must move
    assert not torch.allclose(before, after, atol=1e-4)
    torch.testing.assert_close(after, qnet.state_vectors(qnet.tokenize_states(QUESTIONS[:1], [[]])), atol=1e-5, rtol=0)


def test_state_parts_anchor_is_the_frozen_term_and_zero_on_bare_questions(tiny_encoder_path: Path) -> None:
    qnet = trained(tiny_encoder_path, "question")
    inputs = qnet.tokenize_states(QUESTIONS, TAKEN)
    parts = qnet.state_parts(inputs, top=1)
    want = qnet.state_vectors(inputs)  # f_θ(s) + f_0(q) − f_0(s), every term over the whole batch
    assert parts.anchor is not None and torch.equal(parts.anchor[2], torch.zeros_like(parts.anchor[2]))  # s = q
    torch.testing.assert_close(qnet.state_vectors(parts), want, atol=1e-5, rtol=0)


def test_towers_sharing_their_lower_layers_run_them_once(tiny_encoder_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="question").eval()
    found = layers_of(qnet.state_tower.encoder)
    assert found is not None
    torch.manual_seed(2)
    with torch.no_grad():  # only the top layer trains (trainer.train_layers=1): the trunk is the base's
        for p in found[1][-1].parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert qnet._shared_layers(qnet.state_tower) == 0  # a tower that trains shares nothing
    qnet.requires_grad_(False)  # served (load_model merges and freezes)
    assert qnet._shared_layers(qnet.state_tower) == len(found[1]) - 1
    full = qnet.state_vectors(qnet.tokenize_states(QUESTIONS, TAKEN))
    base_layers = {"runs": 0}
    for layer in layers_of(qnet.chunk_tower.encoder)[1]:  # type: ignore[index]
        layer.register_forward_hook(lambda *_: base_layers.__setitem__("runs", base_layers["runs"] + 1))
    torch.testing.assert_close(qnet.embed_states(QUESTIONS, TAKEN), full, atol=1e-5, rtol=0)
    # f_0(q) once (every layer), f_0(s) from the shared trunk: the base's top layer alone
    assert base_layers["runs"] == len(found[1]) + 1
