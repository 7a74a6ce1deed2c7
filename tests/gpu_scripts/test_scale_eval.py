"""The one-command GPU scripts, at CPU scale: text pack, episode construction, BM25, and scale_eval's JSON.

Everything runs on one small text source (britannica, ~1 400 sentences) and a tiny random encoder, so the
whole file takes a few seconds; the GPU runs use the same code at 10M tokens (docs/GPU_GUIDE.md).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.conftest import make_tiny_encoder

GPU_DIR = Path(__file__).resolve().parents[2] / "scripts" / "gpu"
SOURCES = ("britannica",)


def _load(name: str) -> ModuleType:
    if str(GPU_DIR) not in sys.path:
        sys.path.insert(0, str(GPU_DIR))
    spec = importlib.util.spec_from_file_location(name, GPU_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def offline() -> ModuleType:
    return _load("offline")


@pytest.fixture(scope="module")
def scale_eval(offline: ModuleType) -> ModuleType:
    return _load("scale_eval")


@pytest.fixture(scope="module")
def text_pack(offline: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pack") / "sentences.json.xz"
    counts = offline.write_text_pack(path, SOURCES, preset=1)
    assert counts["britannica"] > 1000
    return path


@pytest.fixture()
def packed(offline: ModuleType, text_pack: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pack installed for one test; the package-backed `sentence_pool` comes back afterwards."""
    from qrag.training.data import text_sources as ts

    monkeypatch.setattr(ts, "sentence_pool", ts.sentence_pool)
    offline.install_text_pack(text_pack)
    return text_pack


def _episodes() -> list:  # type: ignore[type-arg]
    from qrag.training.data import load_episodes

    return [
        *load_episodes("babilong", task="qa2", split="test", num_samples=2, num_sentences=300, sources=SOURCES),
        *load_episodes("ruler_niah", task="niah_multivalue", split="test", num_samples=2, num_tokens="4k",
                       sources=SOURCES),
    ]


def test_text_pack_gives_the_same_episodes_as_the_packages(offline: ModuleType, text_pack: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.training.data import text_sources as ts

    before = _episodes()
    monkeypatch.setattr(ts, "sentence_pool", ts.sentence_pool)
    counts = offline.install_text_pack(text_pack)
    assert set(counts) == {"britannica"}
    after = _episodes()
    assert [(e.chunks, e.supporting, e.question) for e in after] == [(e.chunks, e.supporting, e.question) for e in before]
    with pytest.raises(FileNotFoundError, match="not in the text pack"):
        ts.sentence_pool("kjv")


def test_pack_command_and_the_environment_variable(offline: ModuleType, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`offline.py pack PATH --sources` writes a readable pack; only $QRAG_TEXT_PACK or a path installs one."""
    from qrag.training.data import text_sources as ts

    path = tmp_path / "pack.json.xz"
    assert offline.main(["pack", str(path), "--sources", "britannica"]) == 0
    assert "-> " + str(path) in capsys.readouterr().out
    assert offline.main(["pack", str(tmp_path / "bad.json.xz"), "--sources", "britannica,nope"]) == 2
    assert "unknown text source 'nope'" in capsys.readouterr().err and not (tmp_path / "bad.json.xz").exists()
    blob = offline.read_text_pack(path)
    assert list(blob["sources"]) == ["britannica"] and blob["split_version"] == ts.SPLIT_VERSION
    monkeypatch.setattr(ts, "sentence_pool", ts.sentence_pool)
    monkeypatch.delenv("QRAG_TEXT_PACK", raising=False)
    assert offline.maybe_install_text_pack() is None
    monkeypatch.setenv("QRAG_TEXT_PACK", str(path))
    assert offline.maybe_install_text_pack() == {"britannica": ts.sentence_pool("britannica").split_all()}
    monkeypatch.setenv("QRAG_TEXT_PACK", str(tmp_path / "missing.json.xz"))
    with pytest.raises(FileNotFoundError, match="offline.py pack PATH"):
        offline.maybe_install_text_pack()


def test_make_episode_is_the_librarys_ith_episode(scale_eval: ModuleType, packed: Path) -> None:
    from qrag.training.data import load_episodes
    from qrag.training.data.babilong import sentences_for_tokens

    lib = load_episodes("babilong", task="qa3", split="test", num_samples=3, num_sentences=sentences_for_tokens(4000),
                        sources=SOURCES)
    for i in (2, 0):  # sample 2 first: built alone, not after 0 and 1
        ep = scale_eval.make_episode("babilong", "qa3", "4k", "test", 0, i, SOURCES)
        assert (ep.id, ep.chunks, ep.supporting) == (lib[i].id, lib[i].chunks, lib[i].supporting)
    # qa5 at 1K (50 sentences): the library skips stories with more facts and keeps the others' ids.
    lib = load_episodes("babilong", task="qa5", split="test", num_samples=4, num_sentences=50, sources=SOURCES)
    index = {int(e.id.rsplit("-", 1)[1]): e for e in lib}
    built = {i: scale_eval.make_episode("babilong", "qa5", "1k", "test", 0, i, SOURCES) for i in range(max(index) + 1)}
    assert {i for i, e in built.items() if e is not None} == set(index)
    assert all(built[i].chunks == e.chunks for i, e in index.items())
    lib = load_episodes("ruler_niah", task="niah_multikey_2", split="test", num_samples=2, num_tokens="4k", sources=SOURCES)
    ep = scale_eval.make_episode("ruler", "niah_multikey_2", "4k", "test", 0, 1, SOURCES)
    assert (ep.id, ep.chunks, ep.supporting) == (lib[1].id, lib[1].chunks, lib[1].supporting)

    universe = scale_eval.Universe(SOURCES)
    c = scale_eval.compact(ep, universe)
    assert list(scale_eval.Texts(c, universe)) == list(ep.chunks)
    assert c.extras  # needles are not universe sentences


def test_bm25_scores_equal_bm25s(scale_eval: ModuleType) -> None:
    bm25s = pytest.importorskip("bm25s")
    universe = scale_eval.Universe.__new__(scale_eval.Universe)
    universe.texts = ["Mary went to the kitchen.", "The kitchen is north of the garden.", "John took the milk there.",
                      "Where the garden is, the milk is not; the garden is green."]
    universe.row = {t: i for i, t in enumerate(universe.texts)}
    chunks = [universe.texts[3], "Daniel moved to the garden.", universe.texts[0], universe.texts[1],
              "Daniel moved to the garden.", universe.texts[2], universe.texts[3]]
    ep = scale_eval.compact(_Ep("Where is the garden, and where is the milk in the garden?", chunks), universe)
    ours = scale_eval.BM25(universe)
    index = bm25s.BM25()
    index.index(bm25s.tokenize(chunks, stopwords="en", show_progress=False), show_progress=False)
    query = bm25s.tokenize([ep.question], stopwords="en", return_ids=False, show_progress=False)[0]
    assert query == ours.tokens(ep.question)
    np.testing.assert_allclose(ours.scores(ep), index.get_scores(query), rtol=1e-5, atol=1e-6)
    top = ours.top(ep, 2)
    assert set(top) <= {0, 1, 3, 4, 6} and len(top) == 2


class _Ep:
    def __init__(self, question: str, chunks: list[str]) -> None:
        self.id, self.question, self.chunks, self.supporting, self.answer, self.metadata = "x", question, chunks, (), None, {}


def test_scale_eval_end_to_end_json(scale_eval: ModuleType, packed: Path, tmp_path: Path) -> None:
    from qrag.training.qnet import QNetwork

    enc = make_tiny_encoder(tmp_path / "enc")
    QNetwork.from_encoder(str(enc), position_mode="relative", state_order="document", train_mode="lora",
                          lora_rank=2).save_pretrained(tmp_path / "ckpt")
    out = tmp_path / "scale.json"
    rc = scale_eval.main(["--model", str(tmp_path / "ckpt"), "--tasks", "qa1,qa2", "--lengths", "2k,4k",
                          "--samples", "2", "--hops", "1-2", "--latency-lengths", "2k", "--latency-queries", "2",
                          "--qps-batch", "3", "--workers", "0", "--sources", "britannica", "--text-pack", str(packed),
                          "--out", str(out), "--table", str(tmp_path / "table.md")])
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["meta"]["status"] == "complete" and r["meta"]["text_pack"] is True
    assert {"commit", "device", "bf16_autocast", "universe_sentences", "elapsed_s", "peak_rss_mb", "model_config",
            "vectors_embedded"} <= set(r["meta"])
    assert set(r["gpu"]) == {"name", "spec_bf16_tflops", "measured_matmul_bf16_tflops", "peak_memory_allocated_bytes"}
    (scale,) = r["scale"]
    assert {"chunks", "index_seconds", "chunks_per_s", "tokens_mean", "flops_per_chunk_est", "achieved_tflops_est",
            "fraction_of_spec_peak_est", "fraction_of_measured_matmul_est", "index_peak_memory_bytes",
            "latency_peak_memory_bytes", "index_plus_max_hop_p50_s"} <= set(scale)
    assert [lat["hops"] for lat in scale["latency"]] == [1, 2]
    for lat in scale["latency"]:
        assert lat["single_ms_p50"] > 0 and lat["qps_batched"] > 0 and lat["batch"] == 3
    assert [(c["task"], c["length"]) for c in r["cells"]] == [("qa1", "2k"), ("qa2", "2k"), ("qa1", "4k"), ("qa2", "4k")]
    for cell in r["cells"]:
        assert cell["samples_done"] == 2 and len(cell["records"]) == 2
        assert set(cell["methods"]) == {"qrag", "qrag+stop", "dense", "bm25"}
        for stats in cell["methods"].values():
            assert {"fact_em", "fact_recall", "fact_precision", "fact_f1", "hops_mean", "seconds_per_query"} <= set(stats)
            assert 0.0 <= stats["fact_em"] <= stats["fact_recall"] <= 1.0
        qa = cell["records"][0]
        assert len(qa["qrag"]["rows"]) == len(qa["supporting"])  # exactly |SF| picks
        assert len(qa["dense"]) == len(qa["bm25"]) == len(qa["supporting"])
    drift = r["checks"]["drift"]["qrag+stop"]
    assert (drift["short"], drift["long"]) == ("2k", "4k") and set(drift["tasks"]) == {"qa1", "qa2"}
    assert drift["tasks"]["qa1"]["paired"] == 2  # sample i is the same story at both lengths
    assert r["checks"]["latency"]["hops"] == 2
    assert "| qa1 | 2k |" in (tmp_path / "table.md").read_text()
