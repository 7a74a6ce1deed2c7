"""Readers: prompts, document order, the transformers backend and the vLLM backend (against a stand-in)."""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from qrag.eval.baselines import Retrieval
from qrag.eval.reader import ReaderLoadError, TransformersReader, VLLMReader, build_prompt, load_reader
from qrag.eval.runner import read_results, run
from qrag.eval.sweep import RunConfig
from qrag.training.data import Episode


class _FakeVLLM(types.ModuleType):
    """A stand-in with vLLM's interface (`LLM(model=...)`, `SamplingParams`, `LLM.generate`, `get_tokenizer`).

    This is NOT vLLM: vLLM needs a CUDA GPU and is not installed on the test machines. It checks that our
    backend calls vLLM's public API the way vLLM documents it (greedy = temperature 0, `max_tokens`, one
    `RequestOutput` per prompt whose `.outputs[0].text` is the completion).
    """

    def __init__(self) -> None:
        super().__init__("vllm")
        self.calls: list[tuple[list[str], Any]] = []
        fake = self

        class SamplingParams:
            def __init__(self, temperature: float = 1.0, max_tokens: int = 16) -> None:
                self.temperature, self.max_tokens = temperature, max_tokens

        class LLM:
            def __init__(self, model: str, **options: Any) -> None:
                if model == "broken":
                    raise RuntimeError("CUDA out of memory")
                self.model = model

            def get_tokenizer(self) -> Any:
                return types.SimpleNamespace(chat_template=None)

            def generate(self, prompts: list[str], params: SamplingParams) -> list[Any]:
                fake.calls.append((prompts, params))
                return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=f"kitchen {i}")])
                        for i, _ in enumerate(prompts)]

        self.SamplingParams, self.LLM = SamplingParams, LLM


def test_vllm_backend_against_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake)
    reader = load_reader("vllm:some/model", max_new_tokens=7)
    assert isinstance(reader, VLLMReader) and reader.name == "vllm:some/model"
    assert reader.generate(["a", "b"]) == ["kitchen 0", "kitchen 1"]
    prompts, params = fake.calls[0]
    assert prompts == ["a", "b"] and params.temperature == 0.0 and params.max_tokens == 7
    with pytest.raises(ReaderLoadError, match="vLLM could not load 'broken'"):
        load_reader("vllm:broken")


def test_vllm_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ReaderLoadError, match=r"qrag\[vllm\]"):
        load_reader("vllm:any")


def test_prompts_per_benchmark() -> None:
    chunks = ["Mary went to the kitchen.", "Mary took the milk."]
    bl = build_prompt("babilong", "qa2", "Where is the milk?", chunks)
    assert "Mary went to the kitchen.\nMary took the milk." in bl and "carrying" in bl and bl.endswith("Answer:")
    assert build_prompt("babilong", "qa1", "q?", chunks) != bl  # per-task hints
    assert "magic" in build_prompt("ruler_niah", None, "q?", chunks)
    assert build_prompt("hotpotqa", None, "q?", chunks).endswith("Final answer:")


class _Reversed:
    """Returns the gold chunks in reverse document order, to check the reader sees document order."""

    name = "reversed"

    def retrieve(self, episodes: Sequence[Episode]) -> list[Retrieval]:
        return [Retrieval(sorted(e.supporting, reverse=True), 0, [], 0, 0.0) for e in episodes]


class _Capture:
    name = "capture"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str]) -> list[str]:
        self.prompts.extend(prompts)
        return ["garden" for _ in prompts]


def test_reader_sees_chunks_in_document_order(tmp_path: Path) -> None:
    reader = _Capture()
    cfg = RunConfig(benchmark="babilong", out=tmp_path, methods=("oracle",), tasks=("qa4",), lengths=("12",),
                    num_samples=2, progress=False)
    run(cfg, retrievers=[_Reversed()], reader=reader)  # type: ignore[list-item]
    rec = read_results(tmp_path / "results.jsonl")[0]
    from qrag.training.data import load_episodes

    ep = load_episodes("babilong", task="qa4", split="test", num_samples=1, num_sentences=12)[0]
    first, second = (ep.chunks[i] for i in sorted(ep.supporting))
    assert reader.prompts[0].index(first) < reader.prompts[0].index(second)
    assert rec["retrieved"] == sorted(ep.supporting, reverse=True) and "accuracy" in rec


def test_transformers_reader_is_greedy(tiny_reader_path: Path) -> None:
    reader = load_reader(str(tiny_reader_path), max_new_tokens=4)
    assert isinstance(reader, TransformersReader)
    a, b = reader.generate(["Where is the milk?", "Where is the milk?"])
    assert a == b  # greedy decoding is deterministic


def test_reader_bad_path() -> None:
    with pytest.raises(ReaderLoadError, match="does not exist"):
        load_reader("/no/such/reader")


@pytest.mark.slow
def test_bundled_smollm2_reader_answers() -> None:
    """The bundled GGUF reader loads offline and produces text (plumbing only; ~20 s to load on 2 cores)."""
    reader = load_reader("smollm2", max_new_tokens=8)
    prompt = build_prompt("hotpotqa", None, "What colour is the sky?", ["The sky is blue."])
    assert reader.generate([prompt])[0].strip()
