"""The CPU engine (ONNX Runtime) for gradient-free passes: torch's vectors, only where torch's would be computed the
same way, never from weights other than the tower's own, on the tiny encoder."""

from __future__ import annotations

import builtins
import copy
import threading
from typing import Any

import pytest
import torch

from qrag.training.model import onnx_engine
from qrag.training.model.onnx_engine import CPUEngine
from qrag.training.model.qnet import QNetwork
from qrag.training.model.towers import Tower
from qrag.training.search.searcher import load_model


def batch(rows: int = 3, tokens: int = 10, seed: int = 0) -> dict[str, torch.Tensor]:
    """Token ids (rows, tokens) whose rows are padded to different lengths."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 90, (rows, tokens), generator=gen)
    mask = torch.ones_like(ids)
    for r in range(1, rows):
        mask[r, tokens - 2 * r:] = 0
    return {"input_ids": ids * mask, "attention_mask": mask}


def counted(engine: Any) -> list[tuple[int, ...]]:
    """The shapes of the passes `engine` runs from now on."""
    seen: list[tuple[int, ...]] = []
    engine.listeners.append(lambda ids: seen.append(tuple(ids.shape)))
    return seen


def torch_vectors(tower: Tower, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    engine, tower.engine = tower.engine, None
    try:
        with torch.no_grad():
            return tower(**inputs)
    finally:
        tower.engine = engine


@pytest.fixture
def served(tiny_qnet: QNetwork) -> QNetwork:
    qnet = tiny_qnet.eval().serve_engine()
    assert qnet.state_tower.engine is not None and qnet.chunk_tower.engine is not None, qnet.engine_why
    assert not any(m.training for m in qnet.modules())  # the export leaves every module in the mode it found it
    return qnet


def test_a_served_pass_runs_the_engine_and_gives_torchs_vectors(served: QNetwork) -> None:
    tower = served.state_tower
    seen = counted(tower.engine)
    inputs = batch()
    with torch.no_grad():
        got = tower(**inputs)
    assert seen == [(3, 10)]
    torch.testing.assert_close(got, torch_vectors(tower, inputs), atol=1e-5, rtol=1e-4)
    assert "ONNX Runtime at" in served.engine_why


@pytest.mark.parametrize("case", ["gradient", "train mode", "autocast"])
def test_passes_torch_computes_otherwise_stay_in_torch(served: QNetwork, case: str) -> None:
    tower = served.chunk_tower
    seen = counted(tower.engine)
    inputs = batch()
    if case == "gradient":
        out = tower(**inputs)
        assert out.requires_grad
    elif case == "train mode":
        tower.train()
        with torch.no_grad():
            tower(**inputs)
        tower.eval()
    else:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            tower(**inputs)
    assert seen == []
    assert tower.engine is not None  # kept: the next gradient-free pass runs it again
    with torch.no_grad():
        tower(**inputs)
    assert seen == [(3, 10)]


@pytest.mark.parametrize("edit", ["optimiser step", "load_state_dict", "through .data"])
def test_changed_weights_are_never_served_from_the_old_export(served: QNetwork, edit: str) -> None:
    tower = served.state_tower
    seen = counted(tower.engine)
    inputs = batch()
    before = torch_vectors(tower, inputs)
    weight = tower.encoder.get_input_embeddings().weight
    if edit == "optimiser step":  # in place, through autograd's view: the version counter moves
        weight.grad = torch.randn_like(weight)
        torch.optim.SGD([weight], lr=1.0).step()
    elif edit == "load_state_dict":
        state = tower.state_dict()
        key = next(k for k in state if k.endswith("word_embeddings.weight"))
        state[key] = state[key] + 1.0
        tower.load_state_dict(state)
    else:
        weight.data[0] += 1.0  # the first element: a stamp sees it without a version bump
        weight.data[-1] += 1.0
        weight.data[:] = weight.data * 1.5
    with torch.no_grad():
        got = tower(**inputs)
    assert seen == [] and tower.engine is None  # the stale engine was not run, and is dropped
    torch.testing.assert_close(got, torch_vectors(tower, inputs))
    assert not torch.allclose(got, before)


def test_a_copy_carries_no_engine_and_the_original_keeps_its_own(served: QNetwork) -> None:
    copied = copy.deepcopy(served.state_tower)
    assert copied.engine is None and served.state_tower.engine is not None
    inputs = batch()
    with torch.no_grad():
        torch.testing.assert_close(copied(**inputs), served.state_tower(**inputs), atol=1e-5, rtol=1e-4)


def test_training_drops_the_engines_and_torch_env_keeps_torch(served: QNetwork,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    served.train()
    assert served.state_tower.engine is None and served.chunk_tower.engine is None
    served.eval()
    monkeypatch.setenv(onnx_engine.ENV, "torch")
    served.serve_engine()
    assert served.state_tower.engine is None and "QRAG_CPU_ENGINE=torch" in served.engine_why
    monkeypatch.setenv(onnx_engine.ENV, "tensorrt")
    with pytest.raises(ValueError, match=r"QRAG_CPU_ENGINE='tensorrt' is not a CPU engine.*'onnx'.*'torch'"):
        served.serve_engine()


def test_without_onnxruntime_or_when_the_session_disagrees_the_tower_keeps_torch(
        tiny_qnet: QNetwork, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_ort(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "onnxruntime":
            raise ImportError("no onnxruntime", name="onnxruntime")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ort)
    engine, why = CPUEngine.build(tiny_qnet.state_tower.encoder)
    assert engine is None and "ONNX Runtime is not installed (onnxruntime)" in why
    monkeypatch.setattr(builtins, "__import__", real_import)
    monkeypatch.setattr(onnx_engine, "CHECK_ATOL", -1.0)  # any difference at all is too large
    engine, why = CPUEngine.build(tiny_qnet.state_tower.encoder)
    assert engine is None and "differ from torch's" in why
    bf16 = copy.deepcopy(tiny_qnet.state_tower).to(torch.bfloat16)
    assert "not fp32" in CPUEngine.build(bf16.encoder)[1]


def test_exported_graphs_are_cached_on_disk_by_weights_and_a_damaged_one_is_exported_again(
        tiny_qnet: QNetwork, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(onnx_engine.CACHE_ENV, str(tmp_path / "graphs"))
    onnx_engine.forget_sessions()
    encoder = tiny_qnet.state_tower.encoder
    inputs = batch()
    first, _ = CPUEngine.build(encoder)
    assert first is not None
    files = sorted((tmp_path / "graphs").iterdir())
    assert len(files) == 1 and files[0].name.endswith(".onnx") and "-fp32-" in files[0].name
    onnx_engine.forget_sessions()
    real_export = onnx_engine._export
    monkeypatch.setattr(onnx_engine, "_export", lambda e: pytest.fail("exported again: the cached graph was not read"))
    again, _ = CPUEngine.build(encoder)  # another process, as it were: only the disk holds the graph
    assert again is not None
    want = first.run(inputs["input_ids"], inputs["attention_mask"])
    torch.testing.assert_close(again.run(inputs["input_ids"], inputs["attention_mask"]), want, atol=0, rtol=0)
    exports: list[int] = []
    monkeypatch.setattr(onnx_engine, "_export", lambda e: exports.append(1) or real_export(e))
    for damage in (b"not an onnx graph", None):  # bytes that will not open; a graph of other weights
        onnx_engine.forget_sessions()
        if damage is None:
            other = copy.deepcopy(encoder)
            with torch.no_grad():
                next(other.parameters()).mul_(3.0)
            files[0].write_bytes(onnx_engine._export(other))
        else:
            files[0].write_bytes(damage)
        fixed, why = CPUEngine.build(encoder)
        assert fixed is not None, why
        torch.testing.assert_close(fixed.run(inputs["input_ids"], inputs["attention_mask"]), want, atol=1e-6, rtol=0)
    assert len(exports) == 3  # one graph of other weights written by the test, two exports over the damage
    onnx_engine.forget_sessions()
    monkeypatch.setattr(onnx_engine, "_export", lambda e: pytest.fail("the repaired graph was not cached"))
    assert CPUEngine.build(encoder)[0] is not None
    monkeypatch.setattr(onnx_engine, "_export", real_export)
    monkeypatch.setenv(onnx_engine.CACHE_ENV, "0")  # no cache on disk
    assert onnx_engine.cached_graph("d" * 32, None) is None
    (tmp_path / "a-file").write_text("not a folder")  # a cache folder that cannot be made (whoever runs the test)
    monkeypatch.setenv(onnx_engine.CACHE_ENV, str(tmp_path / "a-file" / "graphs"))
    onnx_engine.forget_sessions()
    assert CPUEngine.build(encoder)[0] is not None  # a cache it cannot write costs the next load an export only


def test_a_new_thread_count_opens_a_session_at_that_count(served: QNetwork) -> None:
    tower = served.state_tower
    inputs = batch()
    want = torch_vectors(tower, inputs)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        with torch.no_grad():
            got = tower(**inputs)
        assert set(tower.engine._sessions) == {torch.get_num_threads()}
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_a_pass_over_more_tokens_than_the_limit_hands_its_working_memory_back(served: QNetwork,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tower = served.chunk_tower
    monkeypatch.setattr(onnx_engine, "SHRINK_TOKENS", 20)
    threads = torch.get_num_threads()
    session, options = tower.engine._sessions[threads], []

    class Recorded:
        def run(self, names: Any, feeds: Any, run_options: Any = None) -> Any:
            options.append(run_options)
            return session.run(names, feeds, run_options)

    tower.engine._sessions[threads] = Recorded()
    small, large = batch(rows=2, tokens=10), batch(rows=3, tokens=10)  # 20 tokens, then 30
    for inputs in (small, large):
        with torch.no_grad():
            got = tower(**inputs)
        torch.testing.assert_close(got, torch_vectors(tower, inputs), atol=1e-5, rtol=1e-4)
    assert options[0] is None
    assert options[1] is not None and options[1].get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"


@pytest.mark.parametrize("shrink_tokens", [onnx_engine.SHRINK_TOKENS, 0])
def test_several_callers_at_once_each_get_their_own_rows(served: QNetwork, shrink_tokens: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_engine, "SHRINK_TOKENS", shrink_tokens)  # 0: every pass shrinks the arena as it ends
    tower = served.chunk_tower
    inputs = [batch(rows=1 + i % 3, tokens=6 + i, seed=i) for i in range(16)]
    want = [torch_vectors(tower, x) for x in inputs]
    got: dict[int, torch.Tensor] = {}
    start = threading.Barrier(8)

    def work(c: int) -> None:
        start.wait()
        for i in range(c, len(inputs), 8):
            with torch.no_grad():
                got[i] = tower(**inputs[i])

    threads = [threading.Thread(target=work, args=(c,)) for c in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, w in enumerate(want):
        torch.testing.assert_close(got[i], w, atol=1e-5, rtol=1e-4)


def test_a_loaded_checkpoint_serves_through_the_engine_with_torchs_results(tiny_qnet: QNetwork, tmp_path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.eval.query_cost import PassCounter
    from qrag.training.search import ChunkIndex, MultiHopSearcher

    tiny_qnet.save_pretrained(tmp_path / "ckpt")
    texts = [f"passage {i} about topic {i % 4} and thing {i % 3}" for i in range(12)]
    results = {}
    for engine in ("onnx", "torch"):
        monkeypatch.setenv(onnx_engine.ENV, engine)
        qnet = load_model(tmp_path / "ckpt")
        served = qnet._serving[1:] if qnet._serving is not None else ()  # 'auto' may serve an int8 copy
        engines = [e for t in (qnet.state_tower, qnet.chunk_tower, *served) if t is not None
                   and (e := t.__dict__.get("engine")) is not None]
        assert (qnet.chunk_tower.engine is not None) == (engine == "onnx"), qnet.engine_why
        assert (len(engines) >= 2) == (engine == "onnx"), qnet.engine_why  # the state passes' engine and the chunks
        counter = PassCounter([qnet.state_tower.encoder, qnet.chunk_tower.encoder], engines)
        index = ChunkIndex.from_texts(qnet, texts)
        found = MultiHopSearcher(qnet, index).search_one("which passage is about topic 2 and thing 1?")
        assert counter.passes > 0 and counter.token_layers > 0  # counted on either path
        results[engine] = (found, index.vectors)
    torch.testing.assert_close(results["onnx"][1], results["torch"][1], atol=1e-5, rtol=1e-4)
    assert [h.chunk.text for h in results["onnx"][0].hits] == [h.chunk.text for h in results["torch"][0].hits]
