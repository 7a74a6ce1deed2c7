"""State passes replayed as CUDA graphs (`qrag.training.graphed`): padding a batch to its graph's shape leaves the
state vectors as they were (every anchor), and off a GPU, in training or with gradients, the plain pass runs."""

from __future__ import annotations

import pytest
import torch

from qrag.training.graphed import GraphedPass, bucket, fill_padded
from qrag.training.qnet import QNetwork


def test_buckets_are_powers_of_two() -> None:
    assert [bucket(n) for n in (1, 2, 3, 5, 64, 65)] == [1, 2, 4, 8, 64, 128]
    assert bucket(3, minimum=16) == 16 and bucket(17, minimum=16) == 32


@pytest.mark.parametrize("anchor", ["none", "question", "first_hop", "passages"])
def test_padding_to_the_graphs_shape_keeps_the_state_vectors(tiny_encoder_path, anchor: str) -> None:  # type: ignore[no-untyped-def]
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor=anchor).eval()
    inputs = qnet.tokenize_states(["Where is the milk?", "Who has the apple now?", "Where?"],
                                  [["Mary took the milk."], [], ["John went home.", "Mary went to the garden."]])
    b, n = inputs["input_ids"].shape
    static = {k: torch.zeros(bucket(b), bucket(n, 16), dtype=v.dtype) for k, v in inputs.items()}
    padded = fill_padded(static, inputs, qnet.pad_id)
    assert padded["attention_mask"][b:, 0].eq(1).all() and padded["attention_mask"][b:, 1:].eq(0).all()
    with torch.no_grad():
        want = qnet.state_vectors(inputs)  # (3, D)
        got = qnet.state_vectors(padded)  # (4, D)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[:b], want, atol=1e-5, rtol=1e-5)


def test_off_a_gpu_the_plain_pass_runs(tiny_qnet: QNetwork) -> None:
    calls = []
    graphed = GraphedPass(lambda inputs: calls.append(1) or torch.ones(inputs["input_ids"].shape[0], 2), pad_id=0)
    out = graphed({"input_ids": torch.ones(3, 5, dtype=torch.long), "attention_mask": torch.ones(3, 5, dtype=torch.long)})
    assert out.shape == (3, 2) and calls == [1] and not graphed._graphs
    tiny_qnet.eval()
    assert tiny_qnet.serve_graphed()._graphed is None  # a CPU: no graphs
    tiny_qnet._graphed = GraphedPass(tiny_qnet.state_vectors, tiny_qnet.pad_id)
    tiny_qnet.train()
    assert tiny_qnet._graphed is None  # training never replays a graph


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_replayed_graphs_give_the_eager_state_vectors(tiny_encoder_path) -> None:  # type: ignore[no-untyped-def]
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state").cuda().eval()
    questions = ["Where is the milk?", "Who has the apple now?", "Where?"]
    pieces = [["Mary took the milk."], [], ["John went home.", "Mary went to the garden."]]
    want = qnet.embed_states(questions, pieces)
    qnet.serve_graphed()
    for _ in range(2):  # captured, then replayed
        torch.testing.assert_close(qnet.embed_states(questions, pieces), want, atol=1e-4, rtol=1e-4)
    assert qnet._graphed is not None and qnet._graphed._graphs and qnet._graphed.broken is None
