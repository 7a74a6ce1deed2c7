"""A team's labels in the formats teams have (`qrag.training.data.label_formats`): each format of the same labels
reads as the same questions, and each malformed file is refused naming the file, the line or key, and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qrag.training.data.corpus import Corpus, read_corpus
from qrag.training.data.episode import EpisodeError
from qrag.training.data.label_formats import WEAK_MAX, label_format, read_labels

PASSAGES = [("p1", "Ada Lovelace wrote the first program in 1843."),
            ("p2", "Charles Babbage designed the Analytical Engine."),
            ("p3", "The Analytical Engine was never built in Babbage's lifetime."),
            ("p4", "Grace Hopper wrote the first compiler in 1952.")]
LABELS = [("Who wrote the first program, and for whose engine?", ["p1", "p2"]),
          ("When did Grace Hopper write the first compiler?", ["p4"])]


@pytest.fixture()
def corpus(tmp_path: Path) -> Corpus:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in PASSAGES), encoding="utf-8")
    return read_corpus(path)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _qrag(tmp_path: Path) -> Path:
    return _write(tmp_path / "labels.jsonl",
                  "".join(json.dumps({"question": q, "supporting": s}) + "\n" for q, s in LABELS))


def _llama_index(tmp_path: Path) -> Path:
    # generate_question_context_pairs makes new node ids: the nodes are found by their text
    texts = dict(PASSAGES)
    data = {"queries": {f"q{i}": q for i, (q, _) in enumerate(LABELS)},
            "corpus": {f"node-{p}": texts[p] for _, s in LABELS for p in s},
            "relevant_docs": {f"q{i}": [f"node-{p}" for p in s] for i, (_, s) in enumerate(LABELS)}, "mode": "text"}
    return _write(tmp_path / "qa_dataset.json", json.dumps(data))


def _sentence_transformers(tmp_path: Path) -> Path:
    data = {"queries": {f"q{i}": q for i, (q, _) in enumerate(LABELS)}, "corpus": dict(PASSAGES),
            "relevant_docs": {"q0": {"p1": 1, "p2": 1, "p3": 0}, "q1": ["p4"]}}  # a score of 0 is not relevant
    return _write(tmp_path / "ir_eval.json", json.dumps(data))


def _csv(tmp_path: Path) -> Path:
    rows = [(q, p) for q, s in LABELS for p in s]
    rows = [rows[0], rows[2], rows[1]]  # a question's rows need not be together
    return _write(tmp_path / "labels.csv", "question,passage_id\n" + "".join(f'"{q}",{p}\n' for q, p in rows))


@pytest.mark.parametrize(("make", "fmt"), [(_qrag, "qrag"), (_llama_index, "llama_index"),
                                           (_sentence_transformers, "sentence_transformers"), (_csv, "csv")])
def test_every_format_of_the_same_labels_reads_as_the_same_questions(
        tmp_path: Path, corpus: Corpus, make: object, fmt: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    assert label_format(path) == fmt
    labels = read_labels(path, corpus)
    assert labels.format == fmt and not labels.weak and labels.skipped == []
    assert [(q.question, [corpus.ids[r] for r in q.supporting]) for q in labels.questions] == [
        (q, s) for q, s in LABELS]


def test_answers_alone_are_weak_labels_and_a_frequent_or_missing_answer_is_left_out(
        tmp_path: Path, corpus: Corpus) -> None:
    path = _write(tmp_path / "answers.jsonl", "".join(json.dumps(r) + "\n" for r in [
        {"question": "Who designed the Analytical Engine?", "answer": "Charles  babbage"},  # case and spaces folded
        {"question": "What did they build?", "answer": "the"},  # in every passage: no label
        {"question": "Who founded Rome?", "answer": "Romulus"},  # in none
        {"question": "When was the first compiler?", "answer": "1952"}]))
    labels = read_labels(path, corpus)
    assert labels.format == "answers" and labels.weak
    assert [(q.question, [corpus.ids[r] for r in q.supporting]) for q in labels.questions] == [
        ("Who designed the Analytical Engine?", ["p2"]), ("When was the first compiler?", ["p4"])]
    assert [s.split(": ", 1)[0].rsplit(":", 1)[1] for s in labels.skipped] == ["2", "3"]
    assert f"more than {WEAK_MAX}" in labels.skipped[0] and "none" in labels.skipped[1]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.jsonl", '{"question": "Q one two?", "supporting": ["p9"]}\n', r"bad.jsonl:1.*'p9'"),
    ("bad.jsonl", '{"question": "Q?", "supporting": "p1"}\n', r"bad.jsonl:1: 'supporting' must be a non-empty list"),
    ("bad.jsonl", '{"question": "Q?", "supporting": ["p1"]}\n{oops\n', r"bad.jsonl:2: malformed JSON"),
    ("bad.json", '{"queries": {"q0": "Q?"}, "corpus": {}, "relevant_docs": {"q0": ["n1"]}, "mode": "text"}',
     r"bad.json: relevant_docs\['q0'\]: 'n1' is neither a passage id of the corpus nor a key of 'corpus'"),
    ("bad.json", '{"queries": {"q0": "Q?"}, "corpus": {"n1": "Not a passage here."}, "relevant_docs": {"q0": ["n1"]}}',
     r"the text of 'n1' .* is no passage of the corpus"),
    ("bad.json", '{"queries": {"q0": "Q?"}, "corpus": {}, "relevant_docs": {}}',
     r"bad.json: relevant_docs\['q0'\] must list the question's passages, got nothing"),
    ("bad.json", '{"queries": ["Q?"], "corpus": {}, "relevant_docs": {}}', r"key 'queries' must be an object"),
    ("bad.json", '[1, 2]', r"a JSON label file must be an object"),
    ("bad.json", '{"queries": {\n"q0": }', r"bad.json:2: malformed JSON"),
    ("bad.csv", "query,passage\nQ?,p1\n", r"bad.csv:1: the header must name a question column"),
    ("bad.csv", "question,passage_id\nQ?,p1\n,p2\n", r"bad.csv:3: column 'question' is empty"),
    ("bad.csv", "question,passage_id\nQ?,p7\n", r"bad.csv:2.*'p7'"),
    ("bad.jsonl", '{"question": "Q?", "answer": ""}\n', r"bad.jsonl:1: needs the answer's text in 'answer'"),
    ("bad.jsonl", '{"question": "Q?", "answer": "Ada"}\n{"question": "R?", "answer": "x", "supporting": ["p1"]}\n',
     r"bad.jsonl:2: a line with 'supporting' is qrag's labels"),
    ("bad.txt", "Q?\tp1\n", r"a label file is \.jsonl .*got '\.txt'"),
])
def test_a_malformed_file_of_each_format_is_refused_naming_file_line_and_field(
        tmp_path: Path, corpus: Corpus, name: str, text: str, message: str) -> None:
    with pytest.raises(EpisodeError, match=message):
        read_labels(_write(tmp_path / name, text), corpus)


def test_a_missing_file_is_named(tmp_path: Path, corpus: Corpus) -> None:
    with pytest.raises(FileNotFoundError, match="questions file .*nope.json' does not exist"):
        read_labels(tmp_path / "nope.json", corpus)
