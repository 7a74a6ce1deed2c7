"""Bad input gives clear errors and keeps partial results; baselines obey the shared interface."""

from __future__ import annotations

from pathlib import Path

import pytest

from qrag.eval.baselines import (
    BM25Retriever,
    DenseRetriever,
    MultiHopRetriever,
    OracleRetriever,
    make_retrievers,
)
from qrag.eval.cli import main
from qrag.eval.runner import read_results
from qrag.training.data import Episode

EP = Episode(
    "Where is the football?",
    ["The sun rose over the hills.", "Daniel grabbed the football there.", "A storm came.",
     "Daniel went to the garden.", "Birds sang."],
    (1, 3), "garden", "e0",
)


def test_unknown_benchmark_exits_with_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["nosuchbench", "--out", str(tmp_path)])
    assert e.value.code == 2 and "nosuchbench" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tasks", "qa9"], "unknown task(s) ['qa9']"),
        (["--methods", "bm25,magic"], "unknown method(s) ['magic']"),
        (["--methods", "qrag", "--model", "/no/such/ckpt"], "is not a trained qrag checkpoint"),
        (["--methods", "qrag"], "need a trained checkpoint"),
        (["--lengths", "lots"], "bad length 'lots'"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                    message: str) -> None:
    rc = main(["babilong", "--out", str(tmp_path), "--no-progress", "--num-samples", "1", *extra])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_failing_reader_keeps_partial_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["babilong", "--out", str(tmp_path), "--no-progress", "--num-samples", "2", "--tasks", "qa1",
            "--lengths", "12", "--methods", "bm25,oracle"]
    assert main(base) == 0
    before = (tmp_path / "results.jsonl").read_text()
    assert len(read_results(tmp_path / "results.jsonl")) == 4
    rc = main([*base, "--lengths", "12,24", "--reader", str(tmp_path / "no-reader-here")])
    err = capsys.readouterr().err  # another reader is another sweep: refused before the reader is even loaded
    assert rc == 2 and "reader: None there" in err and "kept" in err
    assert (tmp_path / "results.jsonl").read_text() == before
    other = tmp_path / "with-reader"
    rc = main([*base, "--out", str(other), "--reader", str(tmp_path / "no-reader-here")])
    err = capsys.readouterr().err
    assert rc == 2 and "does not exist" in err


def test_oracle_and_bm25() -> None:
    (oracle,) = OracleRetriever().retrieve([EP])
    assert oracle.indices == [1, 3]
    (bm25,) = BM25Retriever().retrieve([EP])
    assert len(bm25.indices) == 2 and bm25.indices[0] == 1  # the only chunk sharing "football"
    (fixed,) = BM25Retriever(budget=4).retrieve([EP])
    assert len(fixed.indices) == 4


def test_dense_and_multihop_interface(tiny_encoder_path: Path) -> None:
    dense, multihop = make_retrievers(["dense", "multihop"], encoder=str(tiny_encoder_path))
    assert isinstance(dense, DenseRetriever) and isinstance(multihop, MultiHopRetriever)
    (d,) = dense.retrieve([EP])
    (m,) = multihop.retrieve([EP])
    assert len(d.indices) == len(set(d.indices)) == 2 and d.encoder_calls == 1 and d.hops == 0
    assert len(m.indices) == len(set(m.indices)) == 2 and m.hops == 2 and m.encoder_calls == 2
    assert d.q_values == sorted(d.q_values, reverse=True)
    # the first hop of multi-hop search is single-hop dense retrieval on the question alone
    assert m.indices[0] == d.indices[0]


def test_cosine_ranks_by_the_cosine_of_the_dense_vectors(tiny_encoder_path: Path) -> None:
    dense, cosine = make_retrievers(["dense", "cosine"], encoder=str(tiny_encoder_path), budget=5)
    assert isinstance(dense, DenseRetriever) and isinstance(cosine, DenseRetriever) and cosine.name == "cosine"
    (c,) = cosine.retrieve([EP])
    model = dense.model
    q = model.embed_states([EP.question], [[]])[0]  # (D,)
    chunks = model.embed_chunks(list(EP.chunks))  # (N, D)
    want = (chunks @ q) / (chunks.norm(dim=-1) * q.norm())  # (N,) hand-computed cosines
    assert c.indices == want.argsort(descending=True).tolist()
    assert c.q_values == pytest.approx(want.sort(descending=True).values.tolist(), abs=1e-5)
    assert all(-1.0 <= v <= 1.0 for v in c.q_values)


def test_budget_beyond_max_hops_tops_up_without_more_hops(tiny_encoder_path: Path) -> None:
    (multihop,) = make_retrievers(["multihop"], encoder=str(tiny_encoder_path), budget=4, max_hops=2)
    (r,) = multihop.retrieve([EP])
    assert len(r.indices) == 4 and r.hops == 2 and r.encoder_calls == 3


FIXTURES = Path(__file__).parents[1] / "training" / "data" / "fixtures"


@pytest.mark.parametrize(
    "args",
    [
        ["ruler", "--tasks", "niah_single_1,niah_multivalue", "--lengths", "400"],
        ["hotpotqa", "--data", str(FIXTURES / "hotpot_dev_distractor.json")],
        ["musique", "--data", str(FIXTURES / "musique_ans_v1.0_dev.jsonl")],
        ["jsonl", "--data", str(FIXTURES / "custom_episodes.jsonl")],
    ],
    ids=["ruler", "hotpotqa", "musique", "jsonl"],
)
def test_other_benchmarks_run(tmp_path: Path, args: list[str]) -> None:
    assert main([*args, "--out", str(tmp_path), "--no-progress", "--num-samples", "2", "--methods", "bm25,oracle"]) == 0
    records = read_results(tmp_path / "results.jsonl")
    assert records and all(r["method"] in ("bm25", "oracle") for r in records)
    assert all(r["fact_em"] == 1.0 for r in records if r["method"] == "oracle")
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_index_cache_embeds_each_distinct_text_once_and_matches_a_fresh_index(tiny_encoder_path: Path) -> None:
    from qrag.eval.baselines import _IndexCache
    from qrag.training.search.index import ChunkIndex
    from qrag.training.search.searcher import load_model

    model = load_model(str(tiny_encoder_path))
    calls: list[int] = []
    embed = model.embed_chunks
    model.embed_chunks = lambda texts, **kw: (calls.append(len(texts)), embed(texts, **kw))[1]  # type: ignore[method-assign]
    other = Episode("Where is Daniel?", ["Birds sang.", "Daniel went to the garden.", "Mary left.", "Birds sang."],
                    (1,), "garden", "e1")
    cache = _IndexCache()
    first, second = cache.get(model, EP), cache.get(model, other)
    assert calls == [5, 1]  # only "Mary left." is new; a repeated text is embedded once
    for ep, index in ((EP, first), (other, second)):
        fresh = ChunkIndex.from_texts(model, list(ep.chunks), show_progress=False)
        assert index.texts == list(ep.chunks)
        assert (index.vectors - fresh.vectors).abs().max() < 1e-5
    small = _IndexCache(max_texts=6)
    small.get(model, EP)
    small.get(model, other)  # 5 known + 1 new fits; a third corpus past the bound starts afresh
    assert len(small._stores[model.chunk_vectors_key()]) == 6


def test_baselines_beside_a_checkpoint_read_as_far_as_it_whether_or_not_it_runs(tiny_encoder_path: Path,
                                                                                   tmp_path: Path) -> None:
    from qrag.training.model.qnet import QNetwork

    ckpt = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=5).save_pretrained(tmp_path / "ckpt")
    alone = make_retrievers(["cosine", "multihop"], encoder=str(tiny_encoder_path), checkpoint=str(ckpt), budget=5)
    beside = make_retrievers(["cosine", "multihop", "qrag"], encoder=str(tiny_encoder_path), checkpoint=str(ckpt),
                             budget=5)
    for a, b in zip(alone, beside, strict=False):
        assert a.model.config.max_chunk_tokens == b.model.config.max_chunk_tokens == 5  # type: ignore[attr-defined]
        assert a.retrieve([EP])[0].indices == b.retrieve([EP])[0].indices
    assert alone[1].max_hops == beside[1].max_hops  # type: ignore[attr-defined]
