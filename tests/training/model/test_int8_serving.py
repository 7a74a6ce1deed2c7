"""Int8 serving (`serve_in('int8')`, and 'auto' where the int8 graphs are clearly faster): the state passes of both
towers through ONNX Runtime's int8 graphs, the index and every pass with a gradient in fp32, on the tiny encoder."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from qrag.training.model import onnx_engine, precision, serving_speed
from qrag.training.model.onnx_engine import CPUEngine
from qrag.training.model.qnet import QNetwork
from qrag.training.search import ChunkIndex
from tests.training.model.cpus import AMX, AVX2_ONLY, AVX512_BF16

TEXTS = ["Mary went to the kitchen.", "Mary took the milk there.", "John moved to the garden.",
         "The milk is cold.", "Sandra went back to the office."]
QUESTIONS = ["Where is the milk?", "Who went to the garden?", "Where did Mary go?"]


def states(qnet: QNetwork) -> torch.Tensor:
    """(6, D) served state vectors: three bare questions and the same three after one passage each."""
    with torch.no_grad():
        return qnet.embed_states(QUESTIONS * 2, [[]] * 3 + [[TEXTS[0]], [TEXTS[2]], [TEXTS[1]]])


def int8_engines(qnet: QNetwork) -> list[CPUEngine]:
    assert qnet._serving is not None
    return [t.engine for t in qnet._serving[1:] if t is not None]


def test_int8_serves_both_towers_passes_near_fp32_and_the_index_stays_fp32(tiny_qnet: QNetwork) -> None:
    qnet = tiny_qnet.eval()
    exact = states(qnet)
    index = ChunkIndex.from_texts(qnet, TEXTS)
    assert qnet.serve_in("int8").serving_precision == "int8" and qnet.serving_why == "int8 as asked"
    engines = int8_engines(qnet)
    assert len(engines) == 2 and all(e.precision == "int8" for e in engines)  # the state tower and the frozen base
    passes: list[tuple[int, ...]] = []
    for e in engines:
        e.listeners.append(lambda ids: passes.append(tuple(ids.shape)))
    got = states(qnet)
    assert passes, "the served passes ran the int8 graphs"
    cos = torch.nn.functional.cosine_similarity(got, exact)
    assert float(cos.min()) > 0.98 and not torch.equal(got, exact)
    # the towers themselves are untouched: an index embedded now holds exactly the fp32 vectors
    torch.testing.assert_close(ChunkIndex.from_texts(qnet, TEXTS).vectors, index.vectors, atol=0, rtol=0)
    with torch.enable_grad():  # a pass with a gradient runs the fp32 state tower
        assert qnet.state_vectors(qnet.tokenize_states(QUESTIONS, [[]] * 3)).requires_grad


def test_int8_gives_way_to_the_fp32_weights_once_they_change_and_training_drops_it(tiny_qnet: QNetwork) -> None:
    qnet = tiny_qnet.eval().serve_in("int8")
    states(qnet)
    assert qnet._serving is not None
    state_int8 = qnet._serving[1]
    inputs = qnet.tokenize_states(QUESTIONS, [[TEXTS[0]]] * 3)
    with torch.no_grad():
        before = state_int8(**inputs)
        next(qnet.state_tower.encoder.parameters()).add_(0.01)  # an in-place edit, as an optimiser step makes
        after = state_int8(**inputs)
    assert state_int8.engine is None  # the int8 graph of the old weights is dropped, never served again
    qnet.state_tower.engine = None
    with torch.no_grad():
        torch.testing.assert_close(after, qnet.state_tower(**inputs), atol=0, rtol=0)  # the edited fp32 weights
    assert not torch.equal(before, after)
    qnet.train()
    assert qnet.serving_precision == "fp32" and qnet._serving is None
    with pytest.raises(ValueError, match="eval mode"):
        qnet.serve_in("int8")


def test_int8_where_it_cannot_run_warns_and_serves_fp32(tiny_qnet: QNetwork, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(onnx_engine.ENV, "torch")
    with pytest.warns(RuntimeWarning, match="QRAG_CPU_ENGINE=torch"):
        assert tiny_qnet.eval().serve_in("int8").serving_precision == "fp32"
    monkeypatch.delenv(onnx_engine.ENV)
    monkeypatch.setattr(onnx_engine, "INT8_MIN_COSINE", 1.01)  # no int8 graph agrees closely enough
    onnx_engine.forget_sessions()
    with pytest.warns(RuntimeWarning, match="int8 vectors are at cosine"):
        assert tiny_qnet.serve_in("int8").serving_precision == "fp32"


def timed_by_kind(monkeypatch: pytest.MonkeyPatch, **seconds: float) -> list[str]:
    """Every timed pass takes `seconds[kind]` by what runs it ('fp32', 'bf16' or 'int8'); returns the kinds timed."""
    kinds: list[str] = []

    def timer(tower, inputs):  # type: ignore[no-untyped-def]
        engine = tower.__dict__.get("engine")
        kind = ("int8" if getattr(engine, "precision", "") == "int8" else
                "bf16" if next(tower.parameters()).dtype == torch.bfloat16 else "fp32")
        kinds.append(kind)
        return seconds[kind]

    serving_speed.forget_verdicts()
    monkeypatch.setattr(serving_speed, "timed_pass", timer)
    return kinds


def test_auto_serves_int8_only_where_it_is_clearly_the_fastest(cpu, tiny_qnet, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cpu(AVX2_ONLY)  # no native bf16: fp32 against int8
    kinds = timed_by_kind(monkeypatch, fp32=0.010, int8=0.005)
    assert tiny_qnet.eval().serve_in("auto").serving_precision == "int8"
    assert sorted(set(kinds)) == ["fp32", "int8"] and len(kinds) == 4 * (serving_speed.REPEATS + 1)
    assert "10.0 ms in int8 and 20.0 ms in fp32" in tiny_qnet.serving_why and tiny_qnet.serving_why.endswith("int8 serves")
    timed_by_kind(monkeypatch, fp32=0.010, int8=0.0095)  # 0.95 of fp32: no clear gain
    assert tiny_qnet.serve_in("auto").serving_precision == "fp32"
    cpu(AVX512_BF16)  # bf16 offered too: the fastest of the two, if clearly faster than fp32
    kinds = timed_by_kind(monkeypatch, fp32=0.010, bf16=0.006, int8=0.005)
    assert tiny_qnet.serve_in("auto").serving_precision == "int8" and set(kinds) == {"fp32", "bf16", "int8"}
    timed_by_kind(monkeypatch, fp32=0.010, bf16=0.004, int8=0.005)
    assert tiny_qnet.serve_in("auto").serving_precision == "bf16"
    monkeypatch.setenv(onnx_engine.ENV, "torch")  # no int8 graphs: bf16 against fp32 alone
    kinds = timed_by_kind(monkeypatch, fp32=0.010, bf16=0.012)
    assert tiny_qnet.serve_in("auto").serving_precision == "fp32" and "int8" not in kinds


AVX512_NO_VNNI = frozenset({"sse4_2", "avx2", "avx512f", "avx512bw"})


def test_the_weights_width_follows_the_cpu_and_the_variable(cpu, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(onnx_engine.INT8_WEIGHTS_ENV, raising=False)
    for flags, bits in ((AVX2_ONLY, 7), (AVX512_NO_VNNI, 7), (AVX512_BF16, 8), (AMX, 8),
                        (AVX2_ONLY | {"avx_vnni"}, 8)):
        cpu(flags)
        assert onnx_engine.int8_weight_bits() == bits, sorted(flags)
    cpu(frozenset({"asimd", "asimddp"}))
    monkeypatch.setattr(precision.platform, "machine", lambda: "aarch64")  # no 16-bit pair sums there
    assert onnx_engine.int8_weight_bits() == 8
    for asked in ("7", "8"):
        monkeypatch.setenv(onnx_engine.INT8_WEIGHTS_ENV, asked)
        assert onnx_engine.int8_weight_bits() == int(asked)
    monkeypatch.setenv(onnx_engine.INT8_WEIGHTS_ENV, "4")
    with pytest.raises(ValueError, match="QRAG_INT8_WEIGHTS='4' is not a weight width"):
        onnx_engine.int8_weight_bits()


def int8_weights(graph: bytes) -> list[np.ndarray]:
    model = onnx.load_from_string(graph)
    return [onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8]


def test_seven_bit_weights_keep_every_avx2_pair_sum_in_16_bits(tiny_qnet: QNetwork) -> None:
    fp32 = onnx_engine._export(tiny_qnet.state_tower.encoder)
    eight, seven = int8_weights(onnx_engine._quantized(fp32, 8)), int8_weights(onnx_engine._quantized(fp32, 7))
    assert eight and len(eight) == len(seven)  # every MatMul's weights, in both
    assert max(int(np.abs(w).max()) for w in eight) == 127  # each output channel's largest weight at full range
    widest = max(int(np.abs(w).max()) for w in seven)
    assert widest == 64 and 2 * 255 * widest <= 32767 < 2 * 255 * 127  # two uint8 inputs times a weight: in int16


def test_a_seven_bit_graph_serves_near_fp32_and_is_cached_apart(tiny_qnet: QNetwork, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(onnx_engine.CACHE_ENV, str(tmp_path))
    onnx_engine.forget_sessions()
    qnet = tiny_qnet.eval()
    exact = states(qnet)
    served = {}
    for bits in ("8", "7"):
        monkeypatch.setenv(onnx_engine.INT8_WEIGHTS_ENV, bits)
        qnet.serve_in("int8")
        assert [e.weight_bits for e in int8_engines(qnet)] == [int(bits)] * 2
        assert qnet.serving_precision == "int8"
        served[bits] = states(qnet)
        assert float(torch.nn.functional.cosine_similarity(served[bits], exact).min()) > 0.98
    assert not torch.equal(served["7"], served["8"])  # two graphs, never one read for the other
    names = {p.name.split("-")[1] for p in tmp_path.glob("*.onnx")}
    assert names == {"int8", "int8w7"}  # a graph of each width (the untrained towers share one digest)
    assert onnx_engine.cached_graph("d" * 32, None).name.startswith("d" * 32 + "-fp32-")


def test_while_a_copy_serves_the_state_towers_fp32_session_is_freed_and_fp32_builds_it_again(tiny_qnet: QNetwork) -> None:
    qnet = tiny_qnet.eval().serve_engine()
    fp32 = qnet.state_tower.engine
    assert fp32 is not None and fp32.precision == "fp32"
    exact = states(qnet)

    def kept_fp32_state_sessions() -> int:
        return sum(1 for digest, _, bits in onnx_engine._SESSIONS if digest == fp32._digest and bits is None)

    assert kept_fp32_state_sessions() == 1
    qnet.serve_in("int8")
    assert qnet.state_tower.engine is None and kept_fp32_state_sessions() == 0  # nothing holds it any more
    assert "fp32 engine is dropped" in qnet.engine_why and "chunk tower: ONNX Runtime" in qnet.engine_why
    assert qnet.chunk_tower.engine is not None  # an index's vectors still run the chunk tower's fp32 graph
    served = states(qnet)
    assert float(torch.nn.functional.cosine_similarity(served, exact).min()) > 0.98
    qnet.serve_engine()  # built again after a hand edit: the state tower's stays dropped while int8 serves
    assert qnet.state_tower.engine is None and qnet.serving_precision == "int8"
    torch.testing.assert_close(states(qnet), served, atol=0, rtol=0)
    qnet.serve_in("fp32")  # fp32 serves from the state tower's fp32 engine again, and the process keeps it
    assert qnet.state_tower.engine is not None and qnet.state_tower.engine.precision == "fp32"
    assert kept_fp32_state_sessions() == 1 and qnet.engine_why.startswith("state tower: ONNX Runtime")
    ran: list[int] = []
    qnet.state_tower.engine.listeners.append(lambda ids: ran.append(ids.shape[0]))
    torch.testing.assert_close(states(qnet), exact, atol=1e-5, rtol=1e-4)
    assert ran, "the fp32 passes ran the rebuilt engine"
