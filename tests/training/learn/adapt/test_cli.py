"""`qrag-adapt`: bad input refused before any work (nothing written, nothing lost), and a whole run with a tiny
model: the model folder and report it writes, the choice it records, and a run stopped midway going on where it was."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml

from qrag.training.data.corpus import read_corpus
from qrag.training.learn.adapt import run as adapt_module
from qrag.training.learn.adapt.cli import main
from qrag.training.learn.config import load_preset
from qrag.training.model.qnet import QNetwork
from qrag.training.search import neighbours as neighbours_module
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher, load_model
from qrag.training.search.settings import HopSettings

CITIES = ["Port Ellis", "Kestrel Bay", "Amber Ford", "Lowmere", "Daska", "Vireo Point", "Halden", "Marrow Cross"]


def band_rows() -> list[dict[str, str]]:
    """12 bands naming their 2 musicians, 24 musicians naming their city, 8 cities named by 3 each (44 questions),
    and 40 passages that name nothing."""
    rows = []
    for b in range(12):
        a, c = f"Ada Voss{b}", f"Cleo Marsh{b}"
        rows.append({"id": f"band-{b}", "title": f"Lantern{b}", "text": f"Lantern{b} is a rock band of {a} and {c}."})
        for i, person in enumerate((a, c)):
            city = CITIES[(2 * b + i) % len(CITIES)]
            rows.append({"id": person, "title": person, "text": f"{person} is a rock guitarist born in {city}."})
    rows += [{"id": city, "title": city, "text": f"{city} is a coastal town with a harbour."} for city in CITIES]
    return rows + [{"id": f"note-{i}", "text": f"a note on the weather, number {i}."} for i in range(40)]


def _lines(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    return _lines(tmp_path / "corpus.jsonl", band_rows())


@pytest.mark.parametrize(("rows", "message"), [
    ([], "holds no passages"),
    ([{"id": "a", "text": "x."}, {"id": "a", "text": "y."}], "passage id 'a' repeats"),
    ([{"id": f"p{i}", "text": f"Passage {i} is short."} for i in range(5)], "holds 5 passages.*at least 20"),
    ([{"id": f"p{i}", "text": f"plain words, passage {i}."} for i in range(40)], "yields 0 questions.*at least 30"),
])
def test_a_corpus_it_cannot_learn_from_is_refused_before_any_work(tmp_path: Path, rows: list[dict[str, str]], message: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = _lines(tmp_path / "c.jsonl", rows)
    assert main(["--corpus", str(path), "--out", str(tmp_path / "out")]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_bad_arguments_are_named(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep")
    cases = [
        (["--out", str(mine)], "already holds files \\(keep.txt\\)"),
        (["--out", str(tmp_path / "o"), "--minutes", "0"], "--minutes must be a positive number"),
        (["--out", str(tmp_path / "o"), "--threads", "0"], "--threads must be >= 1"),
        (["--out", str(tmp_path / "o"), "--train-layers", "-1"], "--train-layers must be >= 0 \\(0: every layer\\)"),
        (["--out", str(tmp_path / "o"), "--train-layers", "6"], "--train-layers must be between 1 and 5"),
        (["--out", str(tmp_path / "o"), "--init", str(tmp_path)], "is not a trained qrag checkpoint"),
        (["--out", str(tmp_path / "o"), "--questions", str(tmp_path / "none.jsonl")], "none.jsonl"),
    ]
    for extra, message in cases:
        assert main(["--corpus", str(corpus), *extra]) == 2
        assert re.search(message, capsys.readouterr().err), extra
    assert not (tmp_path / "o").exists() and (mine / "keep.txt").read_text() == "keep"
    assert main(["--corpus", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.fixture()
def tiny_start(tmp_path: Path, tiny_encoder_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny start (frozen chunk tower, LoRA state tower), tiny training runs, and hard negatives by the tiny encoder."""
    monkeypatch.setattr(neighbours_module, "NEIGHBOUR_ENCODER", str(tiny_encoder_path))

    def tiny_preset(name: str):  # type: ignore[no-untyped-def]
        config = load_preset(name)
        t = config.trainer
        t.num_envs, t.rollout_steps, t.minibatch_size, t.log_every, t.eval_every, t.save_every = 2, 2, 4, 4, 8, 4
        t.total_transitions, t.progress = 8, False
        return config

    monkeypatch.setattr(adapt_module, "load_preset", tiny_preset)
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="lora", train_towers="state", lora_rank=4, max_chunk_tokens=32,
                                 max_state_piece_tokens=32, normalize=True, scale=1.0)
    qnet.hop_settings = HopSettings(max_hops=2, stop_threshold=0.3, calibrated=True, fill="question_unguarded",
                                    lexical_weight=0.2)
    return qnet.save_pretrained(tmp_path / "start")


@pytest.mark.slow
def test_a_run_writes_a_model_and_its_report_and_goes_on_where_it_stopped(tmp_path: Path, corpus: Path, tiny_start: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["--corpus", str(corpus), "--out", str(out), "--init", str(tiny_start), "--threads", "1"]
    # A budget too small to train stops after the set-up, the embedding and the start's scores, saying what to do.
    assert main([*argv, "--minutes", "0.4"]) == 2
    assert "pass more minutes (the run goes on from here)" in capsys.readouterr().err
    first = json.loads((out / "work" / "adapt.json").read_text())
    assert {"questions", "embed", "start"} <= set(first["seconds"]) and "train" not in first["seconds"]
    assert not (out / "model").exists()

    code, err = main([*argv, "--minutes", "10"]), capsys.readouterr().err
    assert code == 0, err
    assert "too few to change much" in err  # the tiny preset's 2 updates: said on the screen, and in the report below
    record = json.loads((out / "work" / "adapt.json").read_text())
    assert record["seconds"]["embed"] == first["seconds"]["embed"]  # nothing embedded twice
    facts = record["facts"]
    # 36 fan-outs (12 bands, 24 musicians) less those whose described centre repeats another's question, 8 in-links
    assert facts["kinds"]["in-links"] == 8 and 24 <= facts["kinds"]["fan-out"] <= 36
    # every built question is trained on, held out, or dropped for sharing a passage with a held-out one
    assert facts["train_questions"] + facts["held_out_questions"] + facts["dropped_overlapping"] == facts["built"]
    passages = {name: {s for line in (out / "work" / f"{name}.jsonl").read_text().splitlines()
                       for s in json.loads(line)["supporting"]} for name in ("train", "val")}
    assert passages["val"] and not passages["val"] & passages["train"]
    sizes = [len(json.loads(line)["supporting"]) for line in (out / "work" / "train.jsonl").read_text().splitlines()]
    assert len(sizes) == facts["train_questions"] and facts["horizon"] == round(statistics.median(sizes)) in (2, 3)
    assert facts["start_data"] is None and facts["rehearsed"] == 0  # a start with no validation data of its own
    assert {c["horizon"] for c in facts["candidates"]} == {2, facts["horizon"], 5}
    # as many blends as the start's scoring time says fit in the choice's share of the budget, the fine-tune first
    assert 1.0 in facts["weights"] and {c["weight"] for c in facts["candidates"]} == {0.0, *facts["weights"]}
    assert facts["train_layers"] == 1  # the preset's: the top layer trains on the frozen trunk
    trained = yaml.safe_load((out / "work" / "run" / "config.yaml").read_text())
    assert trained["optim"]["warmup_steps"] == adapt_module.WARMUP_UPDATES  # not the preset's 50 of a short run
    assert trained["optim"]["lr"] == adapt_module.LEARNING_RATE

    model = QNetwork.from_pretrained(out / "model")
    choice = json.loads((out / "model" / "adapt.json").read_text())
    assert choice == facts["choice"] and model.hop_settings.max_hops == choice["horizon"]
    assert model.hop_settings.calibrated and model.config.init == str(tiny_start)
    # every candidate was searched with its own stop threshold, calibrated at its horizon; the choice ships with its own
    assert all(isinstance(c["stop_threshold"], float) for c in facts["candidates"])
    chosen = next(c for c in facts["candidates"] if (c["weight"], c["horizon"]) == (choice["weight"], choice["horizon"]))
    assert model.hop_settings.stop_threshold == chosen["stop_threshold"]
    assert (model.hop_settings.fill, model.hop_settings.lexical_weight) == ("question_unguarded", 0.2)  # kept
    # the corpus's vectors go to the user's retriever with the model: the same search, nothing embedded again
    searcher = MultiHopSearcher.load(out / "searcher")
    assert searcher.index is not None and list(searcher.index.ids) == [r["id"] for r in band_rows()]
    model_again = load_model(out / "model")
    fresh = MultiHopSearcher(model_again, ChunkIndex.from_texts(
        model_again, [r["title"] + ". " + r["text"] if "title" in r else r["text"] for r in band_rows()],
        ids=[r["id"] for r in band_rows()]))
    asked = ["Which rock guitarists are connected to Lantern3?"]
    assert [[h.chunk.id for h in r.hits] for r in searcher.search(asked, k=5)] == \
        [[h.chunk.id for h in r.hits] for r in fresh.search(asked, k=5)]
    report = (out / "report.md").read_text()
    assert f"**{facts['train']['updates']} updates**" in report and "searcher" in report
    assert "**Too few updates to matter**" in report
    share = round(record["seconds"]["train"] / 6)  # the training phase's share of the 10-minute budget, in %
    assert f"minutes ({share} % of the 10-minute budget)" in report
    assert f"ships with the threshold it was scored with, {chosen['stop_threshold']:.3f}." in report
    for part in (f"Built from the corpus: **{facts['built']}**", "Ten of its training questions", "| the start (w = 0) |", "(chosen)",
                 "## Choice", "| **in all** |", "Lantern"):
        assert part in report, part
    assert report.count("\n   - `") >= 20  # ten questions, each with its passages

    # Done: the same command says so and changes nothing.
    stamp = (out / "model").stat().st_mtime_ns
    assert main([*argv, "--minutes", "10"]) == 0
    assert "already done" in capsys.readouterr().out and (out / "model").stat().st_mtime_ns == stamp


def _held_out_setup(tiny_start: Path, fill: str) -> tuple[QNetwork, ChunkIndex, list[tuple[str, list[str]]]]:
    rows = band_rows()[:30]
    net = QNetwork.from_pretrained(tiny_start)
    net.hop_settings = HopSettings(max_hops=2, fill=fill, lexical_weight=0.2)  # type: ignore[arg-type]
    index = ChunkIndex.from_texts(net, [r["text"] for r in rows], [r["id"] for r in rows], lexical=True)
    questions = [(f"Which rock musicians play in Lantern{b}?", [f"band-{b}", f"Ada Voss{b}", f"Cleo Marsh{b}"])
                 for b in range(6)]
    return net, index, questions


def _recalls(searcher: MultiHopSearcher, questions: list[tuple[str, list[str]]], **overrides: Any) -> list[float]:
    results = searcher.search([q for q, _ in questions], **overrides)
    return [len({x.chunk.id for x in r.hits} & set(gold)) / len(gold) for r, (_, gold) in zip(results, questions, strict=True)]


@pytest.mark.parametrize("fill", ["question", "question_unguarded", pytest.param("state", marks=pytest.mark.slow)])
def test_held_out_scores_equal_a_search_with_each_horizon_and_its_calibrated_threshold(tiny_start: Path, fill: str) -> None:
    from qrag.training.learn.adapt.run import held_out_scores
    from qrag.training.learn.stop_calibration import choose_threshold
    from qrag.training.search.settings import SearchConfig

    net, index, questions = _held_out_setup(tiny_start, fill)
    got = held_out_scores(net, index, questions, [1, 2, 3, 5])
    searcher = MultiHopSearcher(net, index, SearchConfig(k=5))
    ids = {r["id"]: i for i, r in enumerate(band_rows()[:30])}
    for h in (1, 2, 3, 5):
        # each question's own share, in order, from its own search with that horizon and threshold
        assert got.recalls[h] == pytest.approx(_recalls(searcher, questions, max_hops=h, stop_threshold=got.thresholds[h])), h
        # the threshold: the stop rule's calibration on that horizon's own hops over the corpus
        hops = [sorted((x for x in r.hits if not x.past_stop), key=lambda x: x.hop)
                for r in searcher.search([q for q, _ in questions], max_hops=h, stop_threshold=None)]
        want, _ = choose_threshold([[x.q_value for x in c] for c in hops], [[ids[x.chunk.id] for x in c] for c in hops],
                                   [[ids[g] for g in gold] for _, gold in questions])
        assert got.thresholds[h] == pytest.approx(want), h


@pytest.mark.parametrize("fill", ["question", "question_unguarded"])
def test_held_out_scores_cut_where_the_threshold_stops_the_guard(tiny_start: Path, fill: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.training.search.settings import SearchConfig

    net, index, questions = _held_out_setup(tiny_start, fill)
    monkeypatch.setattr(adapt_module, "choose_threshold", lambda *a, **k: (1e6, {}))  # above every Q-value: stop after hop 1
    got = adapt_module.held_out_scores(net, index, questions, [2, 3])
    searcher = MultiHopSearcher(net, index, SearchConfig(k=5))
    for h in (2, 3):
        assert got.thresholds[h] == 1e6
        assert got.recalls[h] == pytest.approx(_recalls(searcher, questions, max_hops=h, stop_threshold=1e6)), h
    if fill == "question":  # the threshold did cut the guard's hops (the unguarded fill takes every hop)
        results = searcher.search([q for q, _ in questions], max_hops=3, stop_threshold=1e6)
        assert all(sum(not x.past_stop for x in r.hits) == 1 for r in results)


@pytest.mark.slow
def test_labelled_questions_set_the_horizon_and_score_the_choice(tmp_path: Path, corpus: Path, tiny_start: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    labelled = _lines(tmp_path / "qa.jsonl", [
        {"question": f"Who plays in Lantern{b}, and where were they born?",
         "supporting": [f"band-{b}", f"Ada Voss{b}", f"Cleo Marsh{b}", CITIES[(2 * b) % len(CITIES)]]}
        for b in range(10)])
    base = ["--corpus", str(corpus), "--init", str(tiny_start), "--threads", "1", "--minutes", "0.3",
            "--questions", str(labelled)]
    build = ["--max-questions", "4000"]  # with labels, none are built unless asked
    assert main([*base, *build, "--out", str(tmp_path / "mixed")]) == 2  # stops before training: too short a budget
    assert "pass more minutes" in capsys.readouterr().err
    facts = json.loads((tmp_path / "mixed" / "work" / "adapt.json").read_text())["facts"]
    built = facts["built"]
    assert built > 30 and facts["labelled"] == 10 and facts["horizon"] == 4  # the labelled questions' median
    assert facts["held_out_from"] == "labelled" and facts["held_out_questions"] == 2 + round(0.1 * built)
    held = [json.loads(line) for line in (tmp_path / "mixed" / "work" / "val.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "labelled" for r in held) == 2
    # The same labels as LlamaIndex's EmbeddingQAFinetuneDataset JSON (new node ids, found by their text): the same
    # questions train and are held out, in the same order (only their ids differ)
    rows = [json.loads(line) for line in labelled.read_text().splitlines()]
    texts = dict(zip(read_corpus(corpus).ids, read_corpus(corpus).texts, strict=True))
    llama = tmp_path / "qa_dataset.json"
    llama.write_text(json.dumps({
        "queries": {f"query-{i}": r["question"] for i, r in enumerate(rows)},
        "corpus": {f"node-{p}": texts[p] for r in rows for p in r["supporting"]},
        "relevant_docs": {f"query-{i}": [f"node-{p}" for p in r["supporting"]] for i, r in enumerate(rows)},
        "mode": "text"}))
    assert main([*base[:-1], str(llama), *build, "--out", str(tmp_path / "llama")]) == 2
    capsys.readouterr()
    for name in ("train.jsonl", "val.jsonl"):
        a, b = ([(r["question"], r["supporting"], r.get("kind")) for r in map(json.loads, (tmp_path / run / "work" /
                 name).read_text().splitlines())] for run in ("mixed", "llama"))
        assert a == b
    # Labelled questions alone (the default with --questions: none built): ten are too few, and the fix is named.
    assert main([*base, "--out", str(tmp_path / "alone")]) == 2
    err = capsys.readouterr().err
    assert "yields 0 questions (and 10 labelled); qrag-adapt needs at least 30" in err and "--max-questions 4000" in err
    assert main(["--corpus", str(corpus), "--out", str(tmp_path / "x"), "--max-questions", "0"]) == 2
    assert "without --questions" in capsys.readouterr().err
    # Enough labelled questions train alone, every layer of the state tower (the recipe with labels), unless asked
    many = _lines(tmp_path / "many.jsonl", [
        {"question": f"{what} Lantern{b}?", "supporting": [f"band-{b}", f"Ada Voss{b}", f"Cleo Marsh{b}"]}
        for b in range(12) for what in ("Who plays in", "Which guitarists are in", "Name the members of")])
    assert main([*base[:-1], str(many), "--out", str(tmp_path / "labels")]) == 2  # too short a budget to train
    capsys.readouterr()
    record = json.loads((tmp_path / "labels" / "work" / "adapt.json").read_text())
    assert record["facts"]["built"] == 0 and record["facts"]["labelled"] == 36
    assert (record["request"]["max_questions"], record["request"]["train_layers"]) == (0, 0)
