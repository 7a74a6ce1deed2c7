"""`model.state_anchor='question'`: an untrained network is single-hop dense search at every hop, and
training changes the state vector only through the state tower's change from its base."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qrag.training.learn.config import ConfigError
from qrag.training.model import towers
from qrag.training.model.qnet import QNetwork, question_inputs
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher

TEXTS = [
    "Mary went to the kitchen.", "John picked up the apple.", "Mary took the milk there.",
    "Sandra travelled to the office.", "John went to the garden.", "Daniel dropped the football.",
    "The milk is in the fridge.", "Sandra grabbed the ball.", "Daniel journeyed to the bedroom.",
]


@pytest.fixture()
def anchored(tiny_encoder_path: Path) -> QNetwork:
    return QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="question")


def test_question_inputs_keep_each_rows_prefix_up_to_its_first_sep() -> None:
    cls, sep, pad = 101, 102, 0
    ids = torch.tensor([[cls, 7, 8, sep, 9, sep, pad],
                        [cls, 5, sep, 6, 6, 6, sep],
                        [cls, 4, 4, 4, pad, pad, pad]])  # no [SEP] at all: the whole row
    mask = (ids != pad).long()
    got = question_inputs({"input_ids": ids, "attention_mask": mask}, sep)
    assert got["input_ids"].tolist() == [[cls, 7, 8, sep], [cls, 5, sep, 6], [cls, 4, 4, 4]]
    assert got["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_untrained_anchored_state_is_the_question_alone_at_every_hop(anchored: QNetwork, tiny_encoder_path: Path) -> None:
    plain = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    questions = ["Where is the milk?", "Where is the apple?", "Where is Daniel?"]
    taken = [[TEXTS[2], TEXTS[0]], [TEXTS[1]], []]
    dense = plain.embed_states(questions, [[] for _ in questions])  # the base encoder on the question alone
    torch.testing.assert_close(anchored.embed_states(questions, taken), dense, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(plain.embed_states(questions, taken), dense, atol=1e-3)  # unanchored: it moves


def test_untrained_anchored_search_returns_the_dense_ranking(anchored: QNetwork, tiny_encoder_path: Path) -> None:
    plain = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    index = ChunkIndex.from_texts(anchored, TEXTS)
    for question in ["Where is the milk?", "Who has the ball?"]:
        hits = MultiHopSearcher(anchored, index).search_one(question, k=6, max_hops=6, stop_threshold=None).hits
        scores = plain.score(plain.embed_states([question], [[]]), plain.embed_chunks(TEXTS))[0]
        assert [int(h.chunk.id) for h in hits] == scores.argsort(descending=True)[:6].tolist()
        assert [h.q_value for h in hits] == pytest.approx(scores.sort(descending=True).values[:6].tolist(), abs=1e-5)


def test_only_the_state_tower_learns_and_its_change_moves_every_hop(anchored: QNetwork) -> None:
    anchored.train()
    states = anchored.tokenize_states(["Where is the milk?"], [[TEXTS[2]]])
    chunk = anchored.embed_chunks([TEXTS[6]])  # frozen chunk tower: cached vectors
    q1, q2 = anchored(states, chunk)
    (q1 + q2).sum().backward()
    grads = {n: p.grad for n, p in anchored.named_parameters() if p.grad is not None}
    assert grads and all(n.startswith("state_tower.") for n in grads)
    before = anchored.embed_states(["Where is the milk?"], [[TEXTS[2]]])
    with torch.no_grad():
        for p in anchored.state_tower.parameters():
            p.add_(0.01 * torch.randn_like(p))
    assert not torch.allclose(anchored.embed_states(["Where is the milk?"], [[TEXTS[2]]]), before, atol=1e-4)


def test_anchor_survives_a_checkpoint_round_trip(anchored: QNetwork, tmp_path: Path) -> None:
    with torch.no_grad():
        next(anchored.state_tower.parameters()).add_(0.05)
    anchored.save_pretrained(tmp_path / "ckpt")
    loaded = QNetwork.from_pretrained(tmp_path / "ckpt")
    assert loaded.config.state_anchor == "question"
    args = (["Where is the milk?"], [[TEXTS[2]]])
    torch.testing.assert_close(loaded.embed_states(*args), anchored.embed_states(*args))


def test_anchor_needs_the_frozen_base_chunk_tower(tiny_encoder_path: Path) -> None:
    with pytest.raises(ConfigError, match="state_anchor='question' needs model.train_towers='state'"):
        QNetwork.from_encoder(str(tiny_encoder_path), state_anchor="question")
    with pytest.raises(ConfigError, match="state_anchor='first_hop' needs model.train_towers='state'"):
        QNetwork.from_encoder(str(tiny_encoder_path), state_anchor="first_hop")
    with pytest.raises(ConfigError, match="model.state_anchor"):
        QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="chunks")


def test_embedding_leaves_every_modules_training_flag_as_it_was(anchored: QNetwork) -> None:
    anchored.train()
    anchored.state_tower.encoder.eval()  # pretrained encoders loaded in eval mode inside training-mode wrappers
    anchored.chunk_tower.encoder.eval()
    before = {name: m.training for name, m in anchored.named_modules()}
    anchored.embed_states(["Where is the milk?"], [[TEXTS[2]]])
    anchored.embed_chunks(TEXTS[:2])
    anchored.tokenize_states(["Where is the milk?"], [[TEXTS[2]]])
    anchored(anchored.tokenize_states(["Where is the milk?"], [[TEXTS[2]]]), anchored.embed_chunks([TEXTS[0]]))
    assert {name: m.training for name, m in anchored.named_modules()} == before


def test_first_hop_anchor_keeps_the_bare_question_at_the_base_however_trained(tiny_encoder_path: Path) -> None:
    """`state_anchor='first_hop'`: f_0(q) + [f_θ(s) − f_0(s)] − [f_θ(q) − f_0(q)], checked against the towers
    computed one by one; a bare question (the first hop) is f_0(q) after any change to the state tower."""
    net = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="first_hop")
    plain = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    with torch.no_grad():
        for p in net.state_tower.parameters():
            p.add_(0.02 * torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))
    questions = ["Where is the milk?", "Where is the apple?"]
    f0_q = plain.embed_states(questions, [[], []])  # the base encoder on the question alone
    torch.testing.assert_close(net.embed_states(questions, [[], []]), f0_q, atol=1e-6, rtol=1e-5)
    taken = [[TEXTS[2], TEXTS[0]], [TEXTS[1]]]
    f_theta = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    f_theta.state_tower.load_state_dict(net.state_tower.state_dict())  # f_θ without an anchor
    expected = (f0_q + f_theta.embed_states(questions, taken) - plain.embed_states(questions, taken)
                - (f_theta.embed_states(questions, [[], []]) - f0_q))
    got = net.embed_states(questions, taken)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(got, f0_q, atol=1e-3)  # later hops are what training changed


def test_first_hop_anchor_gives_no_gradient_on_the_first_hop_and_one_on_later_hops(tiny_encoder_path: Path) -> None:
    net = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="first_hop")
    net.train()
    chunk = net.embed_chunks([TEXTS[6]])
    for taken, moves in (([], False), ([TEXTS[2]], True)):
        net.zero_grad()
        q1, q2 = net(net.tokenize_states(["Where is the milk?"], [taken]), chunk)
        (q1 + q2).sum().backward()
        norm = sum(float(p.grad.abs().sum()) for p in net.parameters() if p.grad is not None)
        assert (norm > 1e-6) is moves, (taken, norm)


def test_passage_inputs_drop_each_rows_question_and_keep_cls() -> None:
    cls, sep, pad = 101, 102, 0
    ids = torch.tensor([[cls, 7, 8, sep, 9, sep, pad],
                        [cls, 5, sep, 6, 6, 6, sep],
                        [cls, 4, 4, sep, pad, pad, pad],  # a bare question: [CLS] alone
                        [cls, 4, 4, 4, pad, pad, pad]])  # no [SEP] at all: [CLS] alone
    mask = (ids != pad).long()
    got = towers.passage_inputs({"input_ids": ids, "attention_mask": mask}, sep)
    assert got["input_ids"].tolist() == [[cls, 9, sep, 0, 0], [cls, 6, 6, 6, sep], [cls, 0, 0, 0, 0], [cls, 0, 0, 0, 0]]
    assert got["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 0, 0, 0, 0]]


def _passages_alone(net: QNetwork, tower: torch.nn.Module, taken: list[list[str]]) -> torch.Tensor:
    """`tower` on `[CLS] c1 [SEP] c2 [SEP] …` tokenised by hand, one row at a time: (B, D)."""
    tok = net.tokenizer
    out = []
    for chunks in taken:
        ids = [tok.cls_token_id]
        for c in chunks:
            ids += tok(c, add_special_tokens=False, truncation=True, max_length=net.config.max_state_piece_tokens)["input_ids"]
            ids.append(tok.sep_token_id)
        row = torch.tensor([ids])
        with torch.no_grad():
            out.append(tower(input_ids=row, attention_mask=torch.ones_like(row)))
    return torch.cat(out)


def test_passages_anchor_is_the_question_plus_a_correction_that_cannot_read_it(tiny_encoder_path: Path) -> None:
    """`state_anchor='passages'`: f_0(q) + f_θ(p) − f_0(p), checked against the towers run on the passages
    tokenised alone; a bare question is f_0(q) however trained, and two questions with the same passages get
    the same correction."""
    net = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="passages")
    plain = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    questions = ["Where is the milk?", "Where is the apple?", "Who went to the kitchen first?"]
    taken = [[TEXTS[2], TEXTS[0]], [TEXTS[1]], [TEXTS[2], TEXTS[0]]]
    f0_q = plain.embed_states(questions, [[], [], []])
    torch.testing.assert_close(net.embed_states(questions, taken), f0_q, atol=1e-6, rtol=1e-5)  # untrained: dense
    with torch.no_grad():
        for p in net.state_tower.parameters():
            p.add_(0.02 * torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))
    torch.testing.assert_close(net.embed_states(questions, [[], [], []]), f0_q, atol=1e-6, rtol=1e-5)
    got = net.embed_states(questions, taken)
    expected = f0_q + _passages_alone(net, net.state_tower, taken) - _passages_alone(net, net.chunk_tower, taken)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    correction = got - f0_q
    torch.testing.assert_close(correction[0], correction[2], atol=1e-5, rtol=1e-4)  # same passages, other question
    assert not torch.allclose(correction[0], correction[1], atol=1e-3)


def test_passages_anchor_gives_no_gradient_on_the_first_hop_and_one_on_later_hops(tiny_encoder_path: Path) -> None:
    net = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="passages")
    net.train()
    chunk = net.embed_chunks([TEXTS[6]])
    for taken, moves in (([[], []], False), ([[], [TEXTS[2]]], True)):
        net.zero_grad()
        q1, q2 = net(net.tokenize_states(["Where is the milk?", "Where is the ball?"], taken), chunk.expand(2, -1))
        (q1 + q2).sum().backward()
        norm = sum(float(p.grad.abs().sum()) for p in net.parameters() if p.grad is not None)
        assert (norm > 1e-6) is moves, (taken, norm)
