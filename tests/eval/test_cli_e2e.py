"""End to end: `qrag-eval` with a tiny encoder, a tiny checkpoint and a tiny random causal-LM reader."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import pytest

from qrag.eval.cli import main
from qrag.eval.runner import read_results, run
from qrag.eval.sweep import RunConfig


def _args(out: Path, encoder: Path, *extra: str) -> list[str]:
    return ["babilong", "--tasks", "qa1,qa4", "--lengths", "12,24", "--num-samples", "2", "--encoder", str(encoder),
            "--out", str(out), "--no-progress", *extra]


def test_qrag_eval_end_to_end_with_reader(tmp_path: Path, tiny_encoder_path: Path, tiny_checkpoint: Path,
                                          tiny_reader_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    methods = "bm25,dense,multihop,qrag,qrag+stop,oracle"
    rc = main(_args(out, tiny_encoder_path, "--methods", methods, "--model", str(tiny_checkpoint),
                    "--reader", str(tiny_reader_path), "--max-new-tokens", "3"))
    assert rc == 0, capsys.readouterr().err
    records = read_results(out / "results.jsonl")
    assert len(records) == 2 * 2 * 2 * 6  # tasks × lengths × samples × methods
    for r in records:
        assert {"fact_f1", "fact_em", "accuracy", "output", "hops", "encoder_calls", "latency_s"} <= r.keys()
        if r["method"] == "oracle":
            assert r["fact_em"] == 1.0 and sorted(r["retrieved"]) == sorted(r["supporting"])
        elif r["method"] != "qrag+stop":  # fixed budget: |SF| chunks
            assert len(r["retrieved"]) == len(r["supporting"])
        if r["method"] == "dense":
            assert r["encoder_calls"] == 1 and r["hops"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["primary_metric"] == "accuracy"
    # Indexing throughput and per-hop cost: the vectors each question's corpus cost, counted once per chunk tower.
    embedded = {m: sum(r["chunks_embedded"] for r in records if r["method"] == m) for m in ("dense", "multihop")}
    assert embedded["dense"] > 0 and embedded["multihop"] == 0  # the untrained towers share dense's vectors
    assert all(r["index_s"] == 0.0 and r["chunks_embedded"] == 0 for r in records if r["method"] in ("bm25", "oracle"))
    for method in ("dense", "multihop", "qrag"):
        cell = summary["by_length"][method]["12"]
        assert cell["encoder_call_s"] > 0
    assert summary["by_length"]["dense"]["12"]["index_chunks_per_s"] > 0
    assert summary["peak_memory_mb"]["rss"] > 0
    assert summary["methods"] == methods.split(",") and summary["lengths"] == ["12", "24"]
    assert summary["by_length"]["oracle"]["12"]["fact_em"] == 1.0
    table = (out / "table.md").read_text()
    assert "| qrag+stop |" in table and "answer accuracy" in table and "chunks embedded per second" in table
    image = matplotlib.image.imread(out / "plot.png")
    assert image.ndim == 3 and image.shape[0] > 100
    rows = [line for line in (out / "margins.md").read_text().splitlines() if line.startswith("| qa")]
    assert len(rows) == 2 * 2 * 2  # (qrag, qrag+stop) × tasks × lengths, never against the oracle
    assert all(row.split(" | ")[3].split()[0] in ("bm25", "dense", "multihop") for row in rows)


def test_resumed_sweep_matches_uninterrupted(tmp_path: Path, tiny_encoder_path: Path) -> None:
    def cfg(out: Path) -> RunConfig:
        return RunConfig(benchmark="babilong", out=out, methods=("bm25", "dense", "oracle"), tasks=("qa1", "qa4"),
                         lengths=("12",), num_samples=3, encoder=str(tiny_encoder_path), progress=False)

    full = run(cfg(tmp_path / "full"))
    assert not (tmp_path / "full" / "margins.md").exists()  # nothing trained to compare
    part = tmp_path / "part"
    run(cfg(part), stop_after=7)
    assert len(read_results(part / "results.jsonl")) == 7
    before = (part / "results.jsonl").read_text().splitlines()
    resumed = run(cfg(part))
    after = (part / "results.jsonl").read_text().splitlines()
    assert after[:7] == before  # finished samples were skipped, not redone
    assert len(after) == 2 * 3 * 3 and len({json.loads(x)["key"] for x in after}) == len(after)

    def strip(summary: dict) -> str:  # timings differ between any two runs
        text = json.dumps(summary, sort_keys=True)
        data = json.loads(text)
        data.pop("peak_memory_mb")
        timings = ("latency_s", "retrieval_s", "encoder_call_s", "index_chunks_per_s")
        for row in [*data["cells"], *(row for per in data["by_length"].values() for row in per.values())]:
            for key in timings:
                row.pop(key, None)
        return json.dumps(data, sort_keys=True)

    assert strip(resumed) == strip(full)


def test_chunk_vectors_folder_spares_a_second_sweep_every_embedding(tmp_path: Path, tiny_encoder_path: Path,
                                                                    tiny_checkpoint: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.training.model.qnet import QNetwork

    embedded: list[int] = []
    embed = QNetwork.embed_chunks

    def counting(self: QNetwork, texts: list[str], **kw: object) -> object:
        embedded.append(len(texts))
        return embed(self, texts, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(QNetwork, "embed_chunks", counting)
    # Trained with a frozen chunk tower: it shares the untrained baselines' chunk vectors.
    frozen = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state").save_pretrained(tmp_path / "frozen")
    vectors = tmp_path / "vectors"
    flags = ("--methods", "dense,multihop,qrag", "--model", str(frozen), "--chunk-vectors", str(vectors))
    assert main(_args(tmp_path / "first", tiny_encoder_path, *flags)) == 0, capsys.readouterr().err
    assert sum(embedded) > 0 and len(list(vectors.iterdir())) == 1  # one chunk tower for the three methods
    embedded.clear()
    assert main(_args(tmp_path / "second", tiny_encoder_path, *flags)) == 0, capsys.readouterr().err
    assert embedded == []  # every chunk vector came from the folder
    # A checkpoint whose chunk tower was trained: its vectors are computed afresh and not kept.
    assert main(_args(tmp_path / "both", tiny_encoder_path, "--methods", "dense,qrag", "--model", str(tiny_checkpoint),
                      "--chunk-vectors", str(vectors))) == 0, capsys.readouterr().err
    assert sum(embedded) > 0 and len(list(vectors.iterdir())) == 1

    def fact_scores(out: Path) -> list[tuple]:
        return sorted((r["key"], r["retrieved"], r["fact_em"]) for r in read_results(out / "results.jsonl"))

    assert fact_scores(tmp_path / "first") == fact_scores(tmp_path / "second")
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    assert main(_args(tmp_path / "third", tiny_encoder_path, "--chunk-vectors", str(tmp_path / "a-file"))) == 2
    assert "'" + str(tmp_path / "a-file") + "' is a file; pass a folder" in capsys.readouterr().err
    assert not (tmp_path / "third").exists()  # refused before anything was written
