"""`qrag-eval hotpotqa_pool`: each question searches its split's whole pool; recall@2/5/10 and fact EM@2 against
cosine, with paired intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qrag.eval.cli import main
from qrag.eval.runner import read_results
from qrag.training.data import hotpot_pool as hp

FIXTURE = Path(__file__).parents[1] / "training" / "data" / "fixtures" / "halueval_qa_sample.jsonl"


@pytest.fixture()
def fixture_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture file stands in for the installed one: test rows 6-9 (row 8 is not clean), val rows 4-5."""
    monkeypatch.setattr(hp, "halueval_path", lambda: FIXTURE)
    monkeypatch.setattr(hp, "ROWS", {"train": range(0, 4), "val": range(4, 6), "test": range(6, 10)})
    monkeypatch.setattr(hp, "POOL_ROWS", {"train": range(0, 4), "val": range(0, 6), "test": range(0, 10)})
    hp.load_pool.cache_clear()
    yield  # type: ignore[misc]
    hp.load_pool.cache_clear()


def test_every_question_searches_the_whole_pool(tmp_path: Path, fixture_file: None, tiny_encoder_path: Path,
                                                tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    rc = main(["hotpotqa_pool", "--methods", "cosine,bm25,multihop,qrag,oracle", "--model", str(tiny_checkpoint),
               "--encoder", str(tiny_encoder_path), "--budget", "10", "--out", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    records = read_results(out / "results.jsonl")
    assert {r["task"] for r in records} == {"test"}  # the default: test rows only
    assert sorted({r["id"] for r in records}) == ["hotpotqa-pool-test-6", "hotpotqa-pool-test-7", "hotpotqa-pool-test-9"]
    assert {r["num_chunks"] for r in records} == {12}  # every clean row's distinct passages
    for r in records:
        if r["method"] != "oracle":
            assert r["num_retrieved"] == 10 and r["recall_at_2"] <= r["recall_at_5"] <= r["recall_at_10"]
            assert r["fact_em_at_sf"] == float(set(r["supporting"]) <= set(r["retrieved"][:2]))
    ks = {r["k"] for r in json.loads((out / "recall.json").read_text())}
    assert ks == {2, 5, 10}
    fact = {r["method"]: r for r in json.loads((out / "fact_em_at_2.json").read_text())}
    assert fact["bm25"]["n"] == 3 and "margin" in fact["bm25"] and "margin" not in fact["cosine"]
    assert "fact_em_at_sf (vs cosine)" in (out / "fact_em_at_2.md").read_text()
    # the held-out training rows are a task of their own
    assert main(["hotpotqa_pool", "--tasks", "val", "--methods", "bm25", "--budget", "2", "--out",
                 str(tmp_path / "val"), "--no-progress"]) == 0
    val = read_results(tmp_path / "val" / "results.jsonl")
    assert [r["id"] for r in val] == ["hotpotqa-pool-val-5"] and val[0]["num_chunks"] == 9  # rows 0-5, row 4 not clean


def test_bm25_indexes_a_shared_pool_once(fixture_file: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.eval.baselines import BM25Retriever

    eps = list(hp.iter_hotpot_pool(split="test"))
    bm25 = BM25Retriever(budget=3)
    built = []
    real = bm25._bm25s.BM25
    monkeypatch.setattr(bm25._bm25s, "BM25", lambda: built.append(1) or real())
    got = bm25.retrieve(eps)
    assert len(built) == 1 and all(len(r.indices) == 3 for r in got)
    bm25.retrieve([next(hp.iter_hotpot_pool(split="val"))])  # another corpus: indexed anew
    assert len(built) == 2
