"""Served state passes at their floor (`anchors.served_states`, `QNetwork.frozen_questions`): the vectors of the full
anchored expressions, with a bare question's cancelling terms not encoded and `f_0(q)` encoded once per question."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qrag.training.model import precision
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


def _bare_frozen(qnet: QNetwork) -> torch.Tensor:
    """f_0 of the first question, through the kept vectors."""
    inputs = qnet.tokenizer(QUESTIONS[:1], return_tensors="pt")
    return qnet.frozen_questions({"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]})


def test_kept_question_vectors_see_edits_through_data_and_dtype_moves(tiny_encoder_path: Path) -> None:
    """Edits the version counters miss: `p.data.mul_` on a base weight, and `chunk_tower.to(dtype)`, each serve the
    new weights' f_0(q), never the vector kept from the old ones."""
    qnet = trained(tiny_encoder_path, "question")
    before = _bare_frozen(qnet).clone()
    for p in qnet.chunk_tower.parameters():
        p.data.mul_(0.5)
    after = _bare_frozen(qnet)
    with torch.no_grad():
        inputs = qnet.tokenizer(QUESTIONS[:1], return_tensors="pt")
        want = qnet.chunk_tower(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    assert not torch.allclose(before, after, atol=1e-3)
    torch.testing.assert_close(after, want, atol=1e-6, rtol=0)
    qnet.chunk_tower.to(torch.float64)
    moved = _bare_frozen(qnet)
    assert moved.dtype == torch.float64  # not the float32 vector kept before the move
    for p in qnet.chunk_tower.parameters():  # an edit through .data of the tensors the move made
        p.data.mul_(2.0)
    assert not torch.allclose(_bare_frozen(qnet), moved, atol=1e-3)


def test_kept_question_vectors_are_keyed_by_autocast_and_hold_only_their_row(tiny_encoder_path: Path) -> None:
    qnet = trained(tiny_encoder_path, "question")
    plain = _bare_frozen(qnet).clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = _bare_frozen(qnet)
    again = _bare_frozen(qnet)
    torch.testing.assert_close(again, plain, atol=0, rtol=0)  # fp32 callers get the fp32 vector
    assert len(qnet._question_vectors) == 2  # one per autocast setting
    inputs = qnet.tokenizer(QUESTIONS, return_tensors="pt", padding=True)
    qnet.frozen_questions({"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]})
    for vector in qnet._question_vectors.values():  # a copy of its row, not a view of its batch
        assert vector.untyped_storage().nbytes() == vector.numel() * vector.element_size()
    assert low.shape == plain.shape


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
    assert qnet._shared_layers(qnet.state_tower, qnet.chunk_tower) == 0  # a tower that trains shares nothing
    qnet.requires_grad_(False)  # served (load_model merges and freezes)
    assert qnet._shared_layers(qnet.state_tower, qnet.chunk_tower) == len(found[1]) - 1
    full = qnet.state_vectors(qnet.tokenize_states(QUESTIONS, TAKEN))
    base_layers = {"runs": 0}
    for layer in layers_of(qnet.chunk_tower.encoder)[1]:  # type: ignore[index]
        layer.register_forward_hook(lambda *_: base_layers.__setitem__("runs", base_layers["runs"] + 1))
    torch.testing.assert_close(qnet.embed_states(QUESTIONS, TAKEN), full, atol=1e-5, rtol=0)
    # the two questions with passages: f_0(q) once (every layer) and f_0(s) from the shared trunk (the base's top
    # layer alone); the bare third question's f_0(q) from the trunk too, kept for its later hops
    assert base_layers["runs"] == len(found[1]) + 2
    bare = qnet.state_vectors(qnet.tokenize_states(QUESTIONS, [[], [], []]))
    qnet.forget_kept()
    base_layers["runs"] = 0
    first = qnet.embed_states(QUESTIONS, [[], [], []])  # a search's first hop: bare questions
    torch.testing.assert_close(first, bare, atol=1e-5, rtol=0)
    second = qnet.embed_states(QUESTIONS, TAKEN)  # its second hop: f_0(q) kept from the first
    torch.testing.assert_close(second, full, atol=1e-5, rtol=0)
    # the base's top layer alone: hop 1's bare rows; hop 2's rows with passages, and its bare third row again
    assert base_layers["runs"] == 3  # never a whole pass of a question


def test_a_served_low_precision_copy_shares_the_trunk_with_its_own_base(tiny_encoder_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # what is shared does not depend on the CPU: a CPU without native bf16 is made to take the bf16 copy too
    monkeypatch.setattr(precision, "cpu_bf16_support", lambda: (True, "taken as native for this test"))
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="question").eval()
    found = layers_of(qnet.state_tower.encoder)
    assert found is not None
    torch.manual_seed(2)
    with torch.no_grad():
        for p in found[1][-1].parameters():
            p.add_(0.05 * torch.randn_like(p))
    qnet.requires_grad_(False)
    full = qnet.state_vectors(qnet.tokenize_states(QUESTIONS, TAKEN))
    qnet.serve_in("bf16")
    assert qnet._serving is not None and qnet._serving[2] is not None
    with torch.no_grad():  # a gradient-free pass serves from the copies
        tower = qnet._state_tower_for_pass()
    base = qnet._base_for_pass(tower)
    assert tower is qnet._serving[1] and base is qnet._serving[2] and next(base.parameters()).dtype == torch.bfloat16
    assert qnet._shared_layers(tower, base) == len(found[1]) - 1  # the bf16 copies share what the fp32 towers share
    with torch.no_grad():
        served = qnet.embed_states(QUESTIONS, TAKEN)
    assert torch.nn.functional.cosine_similarity(served.float(), full, dim=1).min() > 0.99
