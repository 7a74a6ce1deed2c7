"""State passes replayed as CUDA graphs (`qrag.training.model.graphed`): padding a batch to its graph's shape leaves the
state vectors as they were (every anchor), and off a GPU, in training or with gradients, the plain pass runs. The
capture-and-replay path itself runs here on the CPU through its twin (`RerunPass`); the GPU test at the end runs it
on CUDA graphs where a GPU is present."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from qrag.training.model.graphed import GraphedPass, RerunPass, bucket, fill_padded
from qrag.training.model.qnet import QNetwork


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


QUESTIONS = ["Where is the milk?", "Who has the apple now?", "Where?"]
PIECES = [["Mary took the milk."], [], ["John went home.", "Mary went to the garden."]]


def test_the_replay_path_gives_the_plain_state_vectors_and_reuses_each_shape(tiny_encoder_path) -> None:  # type: ignore[no-untyped-def]
    """The served path through captured inputs, padding and read-back (the twin of a CUDA graph on the CPU): the
    plain pass's vectors, one capture per padded shape, a batch of another size within the same bucket replayed."""
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state").eval()
    with torch.no_grad():
        want = qnet.embed_states(QUESTIONS, PIECES)  # (3, D)
        qnet._graphed = RerunPass(qnet.state_vectors, qnet.pad_id)
        for _ in range(2):  # captured, then replayed
            torch.testing.assert_close(qnet.embed_states(QUESTIONS, PIECES), want, atol=1e-5, rtol=1e-5)
        assert len(qnet._graphed._graphs) == 1
        ((rows, tokens, _, _),) = qnet._graphed._graphs
        assert rows == 4 and tokens >= 16  # three rows padded to the bucket of four
        torch.testing.assert_close(qnet.embed_states(QUESTIONS[:2], PIECES[:2]), want[:2], atol=1e-5, rtol=1e-5)
        assert qnet._graphed.broken is None and len(qnet._graphed._graphs) == 2  # two rows: a bucket of their own
        inputs = qnet.tokenize_states(QUESTIONS * 2, PIECES * 2)  # six rows: a bucket of eight, not captured yet
    with torch.enable_grad():  # passes with gradients never capture or replay
        assert qnet._graphed(inputs).shape[0] == 6 and len(qnet._graphed._graphs) == 2


def test_merging_adapters_drops_the_graphs_captured_before(tiny_encoder_path) -> None:  # type: ignore[no-untyped-def]
    """Graphs replay the weights they were captured with: after `merge_adapters` the next pass captures again,
    and the served vectors are the unmerged network's (up to float rounding)."""
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="lora", lora_rank=4)
    with torch.no_grad():  # non-zero adapters (B starts at zero), so folding them in changes the weights
        for p in qnet.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    qnet.eval()
    qnet._graphed = RerunPass(qnet.state_vectors, qnet.pad_id)
    with torch.no_grad():
        want = qnet.embed_states(QUESTIONS, PIECES)
        before = qnet._graphed
        assert before._graphs
        qnet.merge_adapters()
        assert isinstance(qnet._graphed, RerunPass) and qnet._graphed is not before and not qnet._graphed._graphs
        torch.testing.assert_close(qnet.embed_states(QUESTIONS, PIECES), want, atol=1e-5, rtol=1e-5)
        assert qnet._graphed._graphs  # captured again, over the merged weights


def test_a_shape_that_cannot_be_captured_runs_the_plain_pass_with_one_warning() -> None:
    class Failing(RerunPass):
        def _capture(self, static):  # type: ignore[no-untyped-def]
            raise RuntimeError("capture refused")

    calls = []
    graphed = Failing(lambda inputs: calls.append(1) or torch.ones(inputs["input_ids"].shape[0], 2), pad_id=0)
    inputs = {"input_ids": torch.ones(3, 5, dtype=torch.long), "attention_mask": torch.ones(3, 5, dtype=torch.long)}
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="capture refused"):
        assert graphed(inputs).shape == (3, 2)
    with torch.no_grad():
        assert graphed(inputs).shape == (3, 2)  # no second attempt, no second warning
    assert calls == [1, 1] and graphed.broken == "RuntimeError: capture refused"


def _own_rows_under_threads(graphed: GraphedPass, device: str, threads: int = 4, rounds: int = 40) -> list[str]:
    """Run `graphed` from `threads` threads at once, each over its own (3, 5) ids of one padded shape; the rounds
    where a thread read back rows that were not its own."""
    wrong: list[str] = []
    start = threading.Barrier(threads)

    def caller(t: int) -> None:
        ids = torch.full((3, 5), 100 + t, dtype=torch.long, device=device)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        start.wait()
        for r in range(rounds):
            with torch.no_grad():
                out = graphed(inputs)
            if not bool(out.eq(100 + t).all()):
                wrong.append(f"thread {t} round {r}: {out[:, 0].tolist()}")

    workers = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return wrong


def _slow_first_id(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, 2) each row's first id, after a pause that lets other threads run between a fill and its read-back."""
    time.sleep(0.002)
    return inputs["input_ids"][:, :1].float().repeat(1, 2)


def test_concurrent_passes_of_one_shape_each_read_their_own_rows() -> None:
    """Several threads replaying one captured shape (the state batcher's `parallel` passes): each gets the vectors
    of its own inputs, never those another thread filled into the shared buffers."""
    graphed = RerunPass(_slow_first_id, pad_id=0)
    assert _own_rows_under_threads(graphed, "cpu") == []
    assert len(graphed._graphs) == 1  # one shape, captured once


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_concurrent_replays_of_one_cuda_graph_each_read_their_own_rows() -> None:
    def first_id(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["input_ids"][:, :1].float().repeat(1, 2) * 1.0

    graphed = GraphedPass(first_id, pad_id=0)
    assert _own_rows_under_threads(graphed, "cuda", rounds=200) == []
    assert graphed.broken is None and len(graphed._graphs) == 1


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
