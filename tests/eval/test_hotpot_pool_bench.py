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
    from qrag.training.search.lexical import LexicalIndex, corpus_lexical

    eps = list(hp.iter_hotpot_pool(split="test"))
    bm25 = BM25Retriever(budget=3)
    built = []
    real = LexicalIndex.from_texts
    monkeypatch.setattr(LexicalIndex, "from_texts", lambda texts, pairs=False: built.append(1) or real(texts, pairs=pairs))
    corpus_lexical.cache_clear()
    got = bm25.retrieve(eps)
    assert len(built) == 1 and all(len(r.indices) == 3 for r in got)
    bm25.retrieve([next(hp.iter_hotpot_pool(split="val"))])  # another corpus: indexed anew
    assert len(built) == 2


def test_the_hybrid_fuses_bm25_and_cosine_by_reciprocal_rank() -> None:
    import math
    from types import SimpleNamespace

    import torch

    from qrag.eval.baselines import HybridRetriever
    from qrag.training.data import Episode

    # BM25 of 'cherry farm': C (cherry, rarer) 1, A 2, B 3 (A and B tie on 'farm': the first comes first).
    # Cosine (given): B 1, C 2, A 3. Fused with c = 60: C 1/61 + 1/62 > B 1/63 + 1/61 > A 1/62 + 1/63.
    ep = Episode("cherry farm", ["apple farm", "banana farm", "cherry orchard"], (2,))
    cosine = SimpleNamespace(rankings=lambda eps: [(torch.tensor([0.1, 0.9, 0.5]), (0.0, 0), 0.0)])
    [got] = HybridRetriever(cosine, budget=3).retrieve([ep])  # type: ignore[arg-type]
    assert got.indices == [2, 1, 0]
    want = [1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62 + 1 / 63]
    assert all(math.isclose(a, b) for a, b in zip(got.q_values, want, strict=True))


def test_the_distractor_setting_holds_the_gold_and_the_pools_bm25_nearest(fixture_file: None) -> None:
    from qrag.eval.sweep import RunConfig, cell_episodes
    from qrag.training.search.lexical import LexicalIndex

    cfg = RunConfig(benchmark="hotpotqa_distractor", out=Path("unused")).validate()
    episodes = cell_episodes(cfg, "test", None)
    pool = hp.load_pool().pools["test"]
    bm25 = LexicalIndex.from_texts(pool)
    assert [ep.id for ep in episodes] == ["hotpotqa-distractor-test-6", "hotpotqa-distractor-test-7",
                                          "hotpotqa-distractor-test-9"]
    for ep in episodes:
        gold = {ep.chunks[i] for i in ep.supporting}
        nearest = [pool[i] for i in bm25.top([ep.question], len(pool))[1][0].tolist() if pool[i] not in gold][:8]
        assert len(ep.chunks) == 10 and len(gold) == 2 and set(ep.chunks) - gold == set(nearest)
    assert episodes == cell_episodes(cfg, "test", None)  # the same every call


def test_a_bad_lexical_weight_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.eval.sweep import RunConfig

    with pytest.raises(ValueError, match=r"lexical_weight \(--lexical-weight\) must be a finite number >= 0 or 'model', "
                                         r"got -1"):
        RunConfig(benchmark="hotpotqa_pool", out=tmp_path, lexical_weight=-1).validate()
    with pytest.raises(SystemExit):
        main(["hotpotqa_pool", "--lexical-weight", "nan", "--out", str(tmp_path / "o")])
    assert "'nan' is not a weight" in capsys.readouterr().err
