"""Your own corpus and questions: the `corpus` source (its files checked line by line, documents split into
passages, episodes with hard negatives), `qrag-train --init` (a fine-tune that keeps the network and the search
settings it starts from, its lineage recorded), and the fine-tuned model in `qrag-eval corpus` beside the model it
started from and in both retrievers, loaded by its folder."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from qrag.training.data import EpisodeError, build_episodes, load_episodes
from qrag.training.data import build as build_module
from qrag.training.data.corpus import read_corpus, read_questions, split_document
from qrag.training.learn.cli.train import main as train_main
from qrag.training.learn.config import ConfigError, DataConfig, TrainConfig
from qrag.training.model.qnet import QNetwork
from qrag.training.search import neighbours as neighbours_module
from qrag.training.search import pool_neighbours
from qrag.training.search.settings import HopSettings

PASSAGES = [("alice", "alice has the cup."), ("bob", "bob is at the park."), ("carol", "carol has the key."),
            ("dave", "dave is at the farm."), ("erin", "erin has the pen."), ("frank", "frank is at the lake."),
            ("grace", "grace has the hat."), ("henry", "henry is at the shop.")]
QUESTIONS = [{"question": "who has the cup?", "supporting": ["alice"]},
             {"question": "who is at the park and who has the key?", "supporting": ["bob", "carol"], "answer": "bob"},
             {"question": "where is dave?", "supporting": ["dave"]},
             {"question": "who has the pen?", "supporting": ["erin"]},
             {"question": "who is at the lake?", "supporting": ["frank"]},
             {"question": "who has the hat or is at the shop?", "supporting": ["grace", "henry"]}]
TINY = ["--trainer.num_envs", "2", "--trainer.rollout_steps", "2", "--trainer.minibatch_size", "4",
        "--trainer.log_every", "4", "--trainer.eval_every", "8", "--trainer.save_every", "4", "--trainer.no-progress",
        "--trainer.threads", "1", "--trainer.max_minutes", "5"]


def _lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_encoder_path: Path) -> dict[str, Path]:
    """A corpus, its questions, and hard negatives found with the tiny encoder (not the bundled MiniLM)."""
    monkeypatch.setattr(neighbours_module, "NEIGHBOUR_ENCODER", str(tiny_encoder_path))
    return {"corpus": _lines(tmp_path / "corpus.jsonl", [{"id": i, "text": t} for i, t in PASSAGES]),
            "questions": _lines(tmp_path / "qa.jsonl", QUESTIONS)}


def test_a_corpus_file_and_its_questions_become_episodes(files: dict[str, Path]) -> None:
    corpus = read_corpus(files["corpus"])
    assert corpus.ids[:2] == ("alice", "bob") and corpus.texts[1] == "bob is at the park."
    whole = load_episodes("corpus", path=str(files["questions"]), corpus=str(files["corpus"]))
    assert len(whole) == 6 and all(ep.chunks == corpus.texts for ep in whole)  # each searches the whole corpus
    assert [whole[1].chunks[i] for i in whole[1].supporting] == ["bob is at the park.", "carol has the key."]
    assert whole[1].answer == "bob" and whole[1].id == "line-2"
    some = load_episodes("corpus", path=str(files["questions"]), corpus=str(files["corpus"]), num_distractors=3,
                         neighbours=pool_neighbours)
    for ep, full in zip(some, whole, strict=True):
        assert len(ep.chunks) == len(full.supporting) + 3 and len(set(ep.chunks)) == len(ep.chunks)
        assert {ep.chunks[i] for i in ep.supporting} == {full.chunks[i] for i in full.supporting}
    assert some == load_episodes("corpus", path=str(files["questions"]), corpus=str(files["corpus"]),
                                 num_distractors=3, neighbours=pool_neighbours)  # deterministic
    with pytest.raises(ValueError, match="needs corpus=PATH"):
        load_episodes("corpus", path=str(files["questions"]))


def test_a_folder_of_documents_is_split_into_passages(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "guide.md").write_text("# Install guide\n\nRun the installer.\nThen restart.\n\n## Updates\n\n"
                                   "Updates come weekly.\n", encoding="utf-8")
    (docs / "sub" / "notes.txt").write_text("First note.\n\n\nSecond note.\n", encoding="utf-8")
    (docs / "image.png").write_bytes(b"\x89PNG")  # not a document: skipped
    corpus = read_corpus(docs)
    assert corpus.ids == ("guide.md#0", "sub/notes.txt#0")
    assert corpus.texts == ("Install guide. Run the installer. Then restart. Updates. Updates come weekly.",
                            "First note. Second note.")
    # Paragraphs pack up to max_words; a longer paragraph is cut between its sentences.
    long = " ".join(f"Sentence number {i} is here." for i in range(6))
    assert split_document(f"{long}\n\nShort tail.", max_words=10) == [
        "Sentence number 0 is here. Sentence number 1 is here.", "Sentence number 2 is here. Sentence number 3 is here.",
        "Sentence number 4 is here. Sentence number 5 is here.", "Short tail."]
    with pytest.raises(EpisodeError, match="holds no .txt or .md file"):
        read_corpus(_empty(tmp_path))


def _empty(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "blank.txt").write_text("\n\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize(("rows", "message"), [
    ([{"id": "a", "text": "x"}, {"text": "y"}], r"corpus.jsonl:2: a passage needs an 'id'"),
    ([{"id": "a", "text": "  "}], r"corpus.jsonl:1: passage 'a' needs a non-empty 'text'"),
    ([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}], r"corpus.jsonl:2: passage id 'a' repeats \(first at .*:1\)"),
    ([{"id": "a", "text": "x"}, {"id": "b", "text": "x"}], r"corpus.jsonl:2: passage 'b' repeats the text of"),
    ([["a", "x"]], r"corpus.jsonl:1: expected a passage object"),
])
def test_bad_corpus_lines_are_named(tmp_path: Path, rows: list, message: str) -> None:
    with pytest.raises(EpisodeError, match=message):
        read_corpus(_lines(tmp_path / "corpus.jsonl", rows))


@pytest.mark.parametrize(("rows", "message"), [
    ([{"question": "q?", "supporting": ["alicee"]}], r"qa.jsonl:1: supporting id 'alicee' names no passage of the "
                                                     r"corpus .* \(did you mean 'alice'\?\)"),
    ([{"question": "q?", "supporting": ["alice", "alice"]}], r"qa.jsonl:1: supporting id 'alice' is listed twice"),
    ([{"question": "q?", "supporting": []}], r"qa.jsonl:1: 'supporting' must be a non-empty list of passage ids"),
    ([{"question": "", "supporting": ["alice"]}], r"qa.jsonl:1: needs a non-empty 'question'"),
    ([{"question": "q?", "supporting": ["alice"]}, {"question": "q?", "supporting": ["bob"]}],
     r"qa.jsonl:2: the question 'q\?' repeats the one at .*qa.jsonl:1"),
    ([{"id": "x", "question": "q?", "supporting": ["alice"]}, {"id": "x", "question": "r?", "supporting": ["bob"]}],
     r"qa.jsonl:2: the id 'x' repeats"),
])
def test_bad_question_lines_are_named(files: dict[str, Path], tmp_path: Path, rows: list, message: str) -> None:
    with pytest.raises(EpisodeError, match=message):
        read_questions(_lines(tmp_path / "qa.jsonl", rows), read_corpus(files["corpus"]))


def test_rehearsal_mixes_a_generated_sources_episodes_into_training_only(files: dict[str, Path]) -> None:
    data = DataConfig(source="corpus", corpus=str(files["corpus"]), train_path=str(files["questions"]), task=None,
                      num_sentences=None, num_train=0, num_val=1, num_distractors=3, rehearse="babi:qa1",
                      rehearse_share=0.5)
    train, val = build_episodes(data, neighbours=pool_neighbours)
    own = [e for e in train if e.metadata.get("source") != "babi"]
    rehearsed = [e for e in train if e.metadata.get("source") == "babi"]
    assert len(own) == 5 and len(rehearsed) == 5  # half of the training set: as many as the 5 own episodes
    assert len(val) == 1 and val[0].metadata.get("source") != "babi"  # validation stays the data's own
    assert [e.question for e in rehearsed] == [e.question for e in load_episodes("babi", task="qa1", num_samples=5)]
    data.rehearse_share = 0.25  # one rehearsed episode for every three of the data's own, rounded
    assert sum(e.metadata.get("source") == "babi" for e in build_episodes(data, neighbours=pool_neighbours)[0]) == 2


def test_validation_only_builds_the_same_validation_and_nothing_to_train_on(files: dict[str, Path],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    held = DataConfig(source="corpus", corpus=str(files["corpus"]), train_path=str(files["questions"]), num_val=2,
                      num_distractors=3, rehearse="babi:qa1")
    full_val = build_episodes(held, neighbours=pool_neighbours)[1]
    loads: list[str | None] = []
    load = build_module.load_episodes

    def counted(*args: object, **kwargs: object) -> object:
        loads.append(kwargs.get("split"))  # type: ignore[arg-type]
        return load(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(build_module, "load_episodes", counted)
    monkeypatch.setattr(build_module, "rehearsal_episodes", lambda *a: pytest.fail("rehearsal built for validation"))
    assert build_episodes(held, validation_only=True, neighbours=pool_neighbours) == ([], full_val)  # held out of the file: it is read
    assert loads == ["train"]
    own_file = dataclasses.replace(held, val_path=str(files["questions"]), num_val=0, rehearse=None)
    loads.clear()
    assert build_episodes(own_file, validation_only=True, neighbours=pool_neighbours)[1] == build_episodes(own_file, neighbours=pool_neighbours)[1]
    assert loads == [None, "train", None]  # the validation file each time, the training file for the full build only


@pytest.mark.parametrize(("rehearse", "share", "message"), [
    ("corpus", 0.3, r"data.rehearse 'corpus' is not a generated source; pass one of babi, babilong"),
    ("babi", 0.3, r"data.rehearse 'babi' needs one of babi's tasks: babi:qa1, babi:qa2"),
    ("hotpotqa_pool:x", 0.3, r"the hotpotqa_pool source has no tasks; pass 'hotpotqa_pool'"),
    ("babi:qa1", 1.0, r"data.rehearse_share must be between 0 and 1 \(exclusive\), got 1.0"),
])
def test_bad_rehearsal_settings_are_named(files: dict[str, Path], rehearse: str, share: float, message: str) -> None:
    data = DataConfig(source="corpus", corpus=str(files["corpus"]), train_path=str(files["questions"]), task=None,
                      num_sentences=None, num_train=0, num_val=1, rehearse=rehearse, rehearse_share=share)
    with pytest.raises(ConfigError, match=message):
        TrainConfig(data=data).validate()  # before any data is read


def test_a_bad_rehearsal_source_is_refused_before_the_corpus_is_read(files: dict[str, Path], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = train_main(["--preset", "corpus-cpu", "--data.corpus", str(files["corpus"]), "--data.train_path",
                       str(files["questions"]), "--data.rehearse", "hotpotqa", "--trainer.output_dir",
                       str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "data.rehearse 'hotpotqa' is not a generated source" in err
    assert "embedding" not in err and not (tmp_path / "run").exists()


@pytest.fixture()
def init_model(tmp_path: Path, tiny_encoder_path: Path) -> Path:
    """A small 'shipped' model: its own truncation, a two-hop horizon, lexical evidence and the unguarded fill."""
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="lora", lora_rank=4, max_chunk_tokens=16,
                                 max_state_piece_tokens=16, normalize=True, scale=1.0)
    qnet.hop_settings = HopSettings(max_hops=2, stop_threshold=0.3, calibrated=True, fill="question_unguarded",
                                    lexical_weight=0.3)
    return qnet.save_pretrained(tmp_path / "init")


@pytest.mark.slow
def test_a_fine_tune_starts_from_the_init_model_and_records_it(files: dict[str, Path], init_model: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ft"
    argv = ["--init", str(init_model), "--preset", "corpus-cpu", "--data.corpus", str(files["corpus"]),
            "--data.train_path", str(files["questions"]), "--data.num_val", "2", "--data.num_distractors", "3",
            "--trainer.total_transitions", "8", "--trainer.output_dir", str(out), *TINY]
    assert train_main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    start, tuned = QNetwork.from_pretrained(init_model), QNetwork.from_pretrained(out / "best")
    assert tuned.config == dataclasses.replace(start.config, init=str(init_model))  # the same network, its lineage
    assert tuned.config.train_mode == "lora" and tuned.hop_settings.max_hops == 2  # the preset's section is not used
    kept = tuned.hop_settings
    assert (kept.fill, kept.lexical_weight, kept.calibrated) == ("question_unguarded", 0.3, True)
    eval_json = json.loads((out / "best" / "eval.json").read_text())
    assert "fact_recall" in eval_json  # the corpus preset selects on the share of supporting passages found
    # An interrupted fine-tune resumes from its last/ checkpoint, not from the model it started from.
    more = [*argv[: argv.index("--trainer.total_transitions")], "--trainer.total_transitions", "16",
            *argv[argv.index("--trainer.total_transitions") + 2:], "--resume"]
    assert train_main(more) == 0, capsys.readouterr().err
    resumed = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert resumed["transitions"] == 16 and resumed["resumed_from"] is not None

    # The fine-tune in both retrievers, by its folder, with its lexical index built.
    from llama_index.core.schema import TextNode

    from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever

    texts = [t for _, t in PASSAGES]
    docs = QRAGRetriever.from_texts(texts, model=str(out / "best"), k=3).invoke("who has the cup?")
    assert len(docs) == 3 and all(d.metadata["score"] >= d.metadata["q_value"] for d in docs)
    assert any(d.metadata["score"] > d.metadata["q_value"] + 1e-6 for d in docs)  # the lexical evidence is weighed
    nodes = [TextNode(text=t, id_=i) for i, t in PASSAGES]
    found = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=str(out / "best"), similarity_top_k=3)
    assert len(found.retrieve("who has the cup?")) == 3 and found.searcher.index.lexical is not None  # type: ignore[union-attr]

    # qrag-eval corpus: the fine-tune beside the model it started from, paired against it.
    from qrag.eval.cli import main as eval_main

    ev = tmp_path / "ev"
    assert eval_main(["corpus", "--data", str(files["questions"]), "--corpus", str(files["corpus"]), "--model",
                      str(out / "best"), "--methods", "cosine,bm25,hybrid,init,qrag", "--budget", "4", "--out", str(ev),
                      "--no-progress"]) == 0
    assert "(vs hybrid)" in (ev / "recall.md").read_text() and "(vs init)" in (ev / "recall_vs_init.md").read_text()
    methods = {json.loads(line)["method"] for line in (ev / "results.jsonl").read_text().splitlines()}
    assert methods == {"cosine", "bm25", "hybrid", "init", "qrag"}


def test_init_refuses_what_cannot_fit(files: dict[str, Path], init_model: Path, tmp_path: Path, tiny_encoder_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--preset", "corpus-cpu", "--data.corpus", str(files["corpus"]), "--data.train_path",
            str(files["questions"]), "--trainer.output_dir", str(tmp_path / "o"), *TINY]
    assert train_main(["--init", str(init_model), *base, "--model.max_chunk_tokens", "64"]) == 2
    assert "--model.max_chunk_tokens 64 differs from the --init model's 16" in capsys.readouterr().err
    assert train_main(["--init", str(tiny_encoder_path), *base]) == 2  # an encoder, not a trained checkpoint
    err = capsys.readouterr().err
    assert "is not a trained qrag checkpoint" in err and "--model.encoder" in err
    assert train_main(["--init", "qrag/no-such-model", *base]) == 2
    assert "is not a trained qrag checkpoint" in capsys.readouterr().err
    assert train_main(["--data.source", "corpus", "--data.train_path", str(files["questions"]),
                       "--trainer.output_dir", str(tmp_path / "o")]) == 2
    assert "pass both --data.source corpus and --data.corpus PATH" in capsys.readouterr().err


def test_the_eval_init_method_needs_a_fine_tune(files: dict[str, Path], init_model: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.eval.cli import main as eval_main

    assert eval_main(["corpus", "--data", str(files["questions"]), "--corpus", str(files["corpus"]), "--model",
                      str(init_model), "--methods", "init", "--out", str(tmp_path / "e"), "--no-progress"]) == 2
    assert "records none (it was trained from the bare encoder" in capsys.readouterr().err


def test_qrag_data_lists_a_folders_passages_with_their_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.training.learn.cli.data import main as data_main

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("One.\n\nTwo.\n", encoding="utf-8")
    assert data_main(["corpus", "--corpus", str(docs), "--out", str(tmp_path / "p.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert rows == [{"id": "a.txt#0", "text": "One. Two."}]
    assert data_main(["corpus"]) == 2 and "needs --corpus PATH" in capsys.readouterr().err
