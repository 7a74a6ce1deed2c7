"""A team's labelled questions in the formats teams already have, read as qrag's own (`corpus.Question`).

`read_labels(path, corpus)` tells the format from the file and reads it, every error naming the file, the line (or
key) and the field:

- **qrag's JSON Lines** (`.jsonl`): `{"question", "supporting": [passage ids], "answer"?, "id"?}` per line
  (`corpus.read_questions`); `supporting` in the order the hops should take them where that matters.
- **LlamaIndex's `EmbeddingQAFinetuneDataset`** (`.json`, as `generate_question_context_pairs(...).save_json`
  writes it): `{"queries": {qid: text}, "corpus": {node_id: text}, "relevant_docs": {qid: [node_id]}, "mode"}`.
- **sentence-transformers' `InformationRetrievalEvaluator` triple** (`.json`): the same three dicts, `queries`,
  `corpus`, `relevant_docs` (a list, a set written as a list, or a dict of relevance scores per query; a score of 0
  is not relevant).

  In both, a node or document id names a passage of the corpus by its id; one the corpus lacks is found by its text
  (whitespace-normalised; the id then names nothing of the corpus, as `generate_question_context_pairs` makes new
  node ids). A text the corpus lacks is refused by name.
- **CSV** (`.csv`, `.tsv`): a header with `question` and `passage_id` (or `supporting` / `doc_id`), one row per
  question and passage; a question's rows, wherever they are, make one question with all its passages, in file order.
- **Answers only, weak labels** (`.jsonl` lines `{"question", "answer"}` without `supporting`): the passages that
  hold the answer text (case and whitespace folded, at word boundaries) become its supporting passages. These are
  guesses, not labels: a frequent answer ("1990") is in many passages, so a question whose answer is in more than
  `WEAK_MAX` passages, or in none, is left out and counted (`Labels.skipped`). Their gain is not measured yet
  (docs/RESULTS.md, "With labels": FanOutQA's answers are per-entity tables, not one text to find).

Importing this loads no model library.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from qrag.training.data.corpus import Corpus, Question, read_questions
from qrag.training.data.episode import EpisodeError, iter_json_lines, read_utf8

LabelFormat = Literal["qrag", "llama_index", "sentence_transformers", "csv", "answers"]
LABEL_FORMATS: tuple[LabelFormat, ...] = ("qrag", "llama_index", "sentence_transformers", "csv", "answers")
WEAK_MAX = 3
"""Most passages a weak label (an answer's text) may name; a question whose answer is in more is left out."""
QUESTION_COLUMNS = ("question", "query")
PASSAGE_COLUMNS = ("passage_id", "supporting", "doc_id", "corpus_id")


@dataclass(frozen=True)
class Labels:
    """What a label file holds: its questions, its format, and the weak-label questions left out (with why)."""

    questions: list[Question]
    format: LabelFormat
    skipped: list[str] = field(default_factory=list)
    """Per question left out: `file:line: why` (answers only: no passage, or more than `WEAK_MAX`, holds the answer)."""

    @property
    def weak(self) -> bool:
        """Whether the labels are guessed from answers (not a team's passage labels)."""
        return self.format == "answers"


def label_format(path: str | Path) -> LabelFormat:
    """The format of a label file, from its suffix and first record (module docstring).

    Raises:
        FileNotFoundError: the file does not exist.
        EpisodeError: a suffix or a first record no format reads (named).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"questions file {str(p)!r} does not exist (or is not a file).")
    suffix = p.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix == ".json":
        return _triple_format(p, _json(p))
    if suffix in (".jsonl", ".ndjson"):

        for _, _where, rec in iter_json_lines(p, "questions file"):
            if isinstance(rec, dict) and "supporting" not in rec and "answer" in rec:
                return "answers"
            return "qrag"
        raise EpisodeError(f"questions file {str(p)!r} holds no questions.")
    raise EpisodeError(f"{p}: a label file is .jsonl (qrag's, or answers only), .json (LlamaIndex's "
                       f"EmbeddingQAFinetuneDataset or sentence-transformers' IR triple) or .csv / .tsv; got "
                       f"{suffix or 'no suffix'!r}.")


def read_labels(path: str | Path, corpus: Corpus) -> Labels:
    """The labelled questions of a file in any format `label_format` tells, resolved against `corpus`.

    Raises:
        FileNotFoundError / EpisodeError: a missing file; a malformed one (file, line or key, and field named).
    """
    p = Path(path)
    if p.suffix.lower() == ".json" and p.is_file():  # parsed once: the format is told from the same object
        data = _json(p)
        fmt = _triple_format(p, data)
        return Labels(_read_triple(p, data, corpus), fmt)
    fmt = label_format(path)
    if fmt == "qrag":
        return Labels(read_questions(path, corpus), fmt)
    if fmt == "csv":
        return Labels(_read_csv(Path(path), corpus), fmt)
    if fmt == "answers":
        questions, skipped = _read_answers(Path(path), corpus)
        return Labels(questions, fmt, skipped)
    raise AssertionError(f"unreachable: {fmt}")  # a .json file is read above


def _triple_format(p: Path, data: Any) -> LabelFormat:
    """LlamaIndex's dataset (it records a `mode`) or sentence-transformers' triple, from a parsed JSON label file."""
    if not isinstance(data, dict):
        raise EpisodeError(f"{p}: a JSON label file must be an object with 'queries', 'corpus' and 'relevant_docs' "
                           f"(LlamaIndex's EmbeddingQAFinetuneDataset, sentence-transformers' IR triple), got "
                           f"{type(data).__name__}; qrag's own labels are JSON Lines (.jsonl).")
    return "llama_index" if "mode" in data else "sentence_transformers"


def _json(p: Path) -> Any:
    try:
        return json.loads(read_utf8(p))
    except json.JSONDecodeError as e:
        raise EpisodeError(f"{p}:{e.lineno}: malformed JSON ({e.msg} at column {e.colno}).") from None


_SPACE = re.compile(r"\s+")


def _folded(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _read_triple(p: Path, data: Any, corpus: Corpus) -> list[Question]:
    """LlamaIndex's EmbeddingQAFinetuneDataset or sentence-transformers' IR triple, parsed (module docstring)."""
    for key in ("queries", "corpus", "relevant_docs"):
        if not isinstance(data.get(key), dict):
            raise EpisodeError(f"{p}: key {key!r} must be an object ({{id: ...}}), got "
                               f"{type(data.get(key)).__name__ if key in data else 'nothing'}.")
    queries: Mapping[str, Any] = data["queries"]
    docs: Mapping[str, Any] = data["corpus"]
    relevant: Mapping[str, Any] = data["relevant_docs"]
    by_text = {_folded(t): i for i, t in enumerate(corpus.texts)}
    ids = set(corpus.ids)

    def row_of(doc: str, where: str) -> int:
        if doc in ids:
            return corpus.row(doc, where)
        text = docs.get(doc)
        if not isinstance(text, str):
            raise EpisodeError(f"{where}: {doc!r} is neither a passage id of the corpus nor a key of 'corpus' with "
                               "its text.")
        row = by_text.get(_folded(text))
        if row is None:
            raise EpisodeError(f"{where}: the text of {doc!r} ({text[:60]!r}...) is no passage of the corpus: label "
                               "the passages of the corpus you adapt on (or add this one to it).")
        return row

    out: list[Question] = []
    seen: dict[str, str] = {}
    for qid, text in queries.items():
        where = f"{p}: queries[{qid!r}]"
        if not isinstance(text, str) or not text.strip():
            raise EpisodeError(f"{where}: the question must be a non-empty string, got {text!r:.60}.")
        got = relevant.get(qid)
        if isinstance(got, dict):
            docs_of = [str(d) for d, score in got.items() if not isinstance(score, (int, float)) or score > 0]
        elif isinstance(got, list):
            docs_of = [str(d) for d in got]
        else:
            raise EpisodeError(f"{p}: relevant_docs[{qid!r}] must list the question's passages, got "
                               f"{'nothing' if got is None else type(got).__name__}.")
        if not docs_of:
            raise EpisodeError(f"{p}: relevant_docs[{qid!r}] lists no passage.")
        rows = list(dict.fromkeys(row_of(d, f"{p}: relevant_docs[{qid!r}]") for d in docs_of))
        folded = _folded(text)
        if folded in seen:
            raise EpisodeError(f"{where}: the question {text.strip()!r:.80} repeats {seen[folded]}.")
        seen[folded] = where
        out.append(Question(text.strip(), tuple(rows), None, str(qid)))
    extra = sorted(set(relevant) - set(queries))
    if extra:
        raise EpisodeError(f"{p}: relevant_docs names {len(extra)} question(s) 'queries' lacks, e.g. {extra[0]!r}.")
    if not out:
        raise EpisodeError(f"{p}: 'queries' holds no questions.")
    return out


def _read_csv(p: Path, corpus: Corpus) -> list[Question]:
    """One row per (question, passage id), under a header naming both columns (module docstring)."""
    delimiter = "\t" if p.suffix.lower() == ".tsv" else ","
    reader = csv.DictReader(read_utf8(p).splitlines(), delimiter=delimiter)
    header = [h.strip().lower() for h in reader.fieldnames or []]
    q_col = next((h for h in QUESTION_COLUMNS if h in header), None)
    p_col = next((h for h in PASSAGE_COLUMNS if h in header), None)
    if q_col is None or p_col is None:
        raise EpisodeError(f"{p}:1: the header must name a question column ({' or '.join(QUESTION_COLUMNS)}) and a "
                           f"passage column ({' or '.join(PASSAGE_COLUMNS)}), got {reader.fieldnames}.")
    names = {h.strip().lower(): h for h in reader.fieldnames or []}
    rows: dict[str, list[int]] = {}
    first: dict[str, str] = {}
    for rec in reader:
        where = f"{p}:{reader.line_num}"
        question, passage = (rec.get(names[q_col]) or "").strip(), (rec.get(names[p_col]) or "").strip()
        if not question:
            raise EpisodeError(f"{where}: column {q_col!r} is empty.")
        if not passage:
            raise EpisodeError(f"{where}: column {p_col!r} is empty (the id of a passage that answers the question).")
        row = corpus.row(passage, where)
        got = rows.setdefault(question, [])
        first.setdefault(question, where)
        if row not in got:
            got.append(row)
    if not rows:
        raise EpisodeError(f"{p}: holds a header and no question.")
    return [Question(q, tuple(r), None, f"line-{first[q].rsplit(':', 1)[1]}") for q, r in rows.items()]


def _read_answers(p: Path, corpus: Corpus) -> tuple[list[Question], list[str]]:
    """Questions with their answer text only: the passages holding the answer become the weak labels."""
    folded = [t.casefold() for t in corpus.texts]
    out: list[Question] = []
    skipped: list[str] = []
    for lineno, where, rec in iter_json_lines(p, "questions file"):
        if not isinstance(rec, dict):
            raise EpisodeError(f"{where}: expected {{\"question\", \"answer\"}}, got {type(rec).__name__}.")
        question, answer = rec.get("question"), rec.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise EpisodeError(f"{where}: needs a non-empty 'question', got {question!r:.60}.")
        if not isinstance(answer, str) or not answer.strip():
            raise EpisodeError(f"{where}: needs the answer's text in 'answer' (a non-empty string), got {answer!r:.60}.")
        if "supporting" in rec:
            raise EpisodeError(f"{where}: a line with 'supporting' is qrag's labels, but an earlier line had none: "
                               "give every line its passages, or none (answers only).")
        pattern = re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, answer.casefold().split())) + r"(?!\w)")
        rows = [i for i, t in enumerate(folded) if pattern.search(t)]
        if not rows or len(rows) > WEAK_MAX:
            skipped.append(f"{where}: the answer {answer.strip()!r:.40} is in {len(rows)} passages "
                           f"({'none' if not rows else f'more than {WEAK_MAX}'}): left out")
            continue
        out.append(Question(question.strip(), tuple(rows), answer.strip(), str(rec.get("id") or f"line-{lineno}")))
    if not out:
        raise EpisodeError(f"{p}: no question's answer is in 1 to {WEAK_MAX} passages of the corpus, so no weak label "
                           f"can be made ({len(skipped)} left out); label the passages (qrag's JSON Lines).")
    return out, skipped


__all__ = ["LABEL_FORMATS", "WEAK_MAX", "LabelFormat", "Labels", "label_format", "read_labels"]
