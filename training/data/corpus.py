"""Your own corpus and questions (the `corpus` source): what a team has, turned into episodes.

Two files, checked line by line (every error names the file, the line and the value):

- **The corpus** (`--data.corpus`): a JSON Lines file of passages, `{"id": "...", "text": "...", "title": "..."}`
  (title optional: the passage reads "{title}. {text}", as in the custom corpus form), or a folder of `.txt` and
  `.md` files, split into passages (`split_document`): paragraphs (blank-line separated) packed up to
  `MAX_WORDS` words, a longer paragraph cut between its sentences (pysbd); a Markdown file's first `# heading`
  is its title. A folder's passage ids are `relative/path.md#n` (`qrag-data corpus` lists them).
- **The questions** (`--data.train_path`, `--data.val_path`): JSON Lines of `{"question": "...", "supporting":
  ["id", ...], "answer": "...", "id": "..."}` (answer and id optional), `supporting` naming the passages that answer
  the question.

Episodes: with `num_distractors=None` a question searches the whole corpus (one shared tuple, in corpus order: how
`qrag-eval corpus` measures). With `num_distractors=n` it holds its supporting passages and n others: hard negatives
(cosine and BM25 neighbours, `qrag.training.data.negatives`) and random ones, shuffled by `seed`: how training sees
the corpus.

Example:
    >>> corpus = read_corpus("corpus.jsonl")  # doctest: +SKIP
    >>> episodes = list(iter_corpus("questions.jsonl", corpus="corpus.jsonl", num_distractors=100))  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from qrag.training.data.episode import Episode, EpisodeError, iter_json_lines, read_utf8
from qrag.training.data.negatives import Neighbours, NeighbourSearch, need_search, negatives_for

MAX_WORDS = 150
"""Most words of a passage split from a document (about 200 MiniLM tokens, under its 256)."""
SUFFIXES = (".txt", ".md")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Corpus:
    """The passages of a corpus: their ids and texts, in corpus order, and where they came from."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    source: str
    titles: tuple[str | None, ...] | None = None
    """Each passage's title (a JSON Lines passage's `title`, a Markdown file's heading), None where it has none;
    None when no passage has one."""

    def row(self, passage_id: str, where: str) -> int:
        """The row of a passage id (raises `EpisodeError` at `where`, with the nearest ids, when there is none)."""
        row = self._rows.get(passage_id)
        if row is None:
            close = difflib.get_close_matches(passage_id, self.ids, n=2)
            hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
            raise EpisodeError(f"{where}: supporting id {passage_id!r} names no passage of the corpus {self.source}"
                               f"{hint}.")
        return row

    @property
    def _rows(self) -> dict[str, int]:
        rows = self.__dict__.get("_row_cache")
        if rows is None:
            rows = {pid: i for i, pid in enumerate(self.ids)}
            object.__setattr__(self, "_row_cache", rows)
        return rows


def read_corpus(path: str | Path) -> Corpus:
    """A corpus from a JSON Lines file or a folder of .txt/.md documents (module docstring).

    Raises:
        FileNotFoundError: the path does not exist.
        EpisodeError: a malformed line, an empty text, a repeated id or text, or a folder without passages.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        return _read_folder(p)
    if not p.is_file():
        raise FileNotFoundError(f"corpus {str(p)!r} does not exist: pass a JSON Lines file of {{\"id\", \"text\"}} "
                                "passages or a folder of .txt/.md files.")
    ids: list[str] = []
    texts: list[str] = []
    titles: list[str | None] = []
    first: dict[str, str] = {}
    for _, where, rec in iter_json_lines(p, "corpus file"):
        if not isinstance(rec, dict):
            raise EpisodeError(f"{where}: expected a passage object {{\"id\", \"text\"}}, got {type(rec).__name__}.")
        pid, text, title = rec.get("id"), rec.get("text"), rec.get("title")
        if not isinstance(pid, (str, int)) or isinstance(pid, bool) or not str(pid).strip():
            raise EpisodeError(f"{where}: a passage needs an 'id' (a non-empty string), got {pid!r}.")
        if not isinstance(text, str) or not text.strip():
            raise EpisodeError(f"{where}: passage {str(pid)!r} needs a non-empty 'text', got {text!r:.60}.")
        if title is not None and not isinstance(title, str):
            raise EpisodeError(f"{where}: passage {str(pid)!r}: 'title' must be a string, got {title!r:.60}.")
        _add(ids, texts, first, str(pid), f"{title.strip()}. {text.strip()}" if title and title.strip() else text.strip(),
             where)
        titles.append(title.strip() if title and title.strip() else None)
    if not ids:
        raise EpisodeError(f"corpus file {str(p)!r} holds no passages.")
    return Corpus(tuple(ids), tuple(texts), str(p), _titles(titles))


def _titles(titles: list[str | None]) -> tuple[str | None, ...] | None:
    return tuple(titles) if any(titles) else None


def _add(ids: list[str], texts: list[str], first: dict[str, str], pid: str, text: str, where: str) -> None:
    """Append a passage, refusing a repeated id or a repeated text (two ids for one chunk make its gold ambiguous)."""
    if pid in first:
        raise EpisodeError(f"{where}: passage id {pid!r} repeats (first at {first[pid]}); ids must be unique.")
    seen = first.get("\0" + text)
    if seen is not None:
        raise EpisodeError(f"{where}: passage {pid!r} repeats the text of the passage at {seen}; keep one of them.")
    first[pid], first["\0" + text] = where, where
    ids.append(pid)
    texts.append(text)


def _read_folder(folder: Path) -> Corpus:
    files = sorted(f for f in folder.rglob("*") if f.is_file() and f.suffix.lower() in SUFFIXES)
    ids: list[str] = []
    texts: list[str] = []
    titles: list[str | None] = []
    first: dict[str, str] = {}
    for f in files:
        name = f.relative_to(folder).as_posix()
        try:
            text = read_utf8(f)
        except EpisodeError as e:
            raise EpisodeError(f"corpus folder {str(folder)!r}: {e}") from None
        markdown = f.suffix.lower() == ".md"
        title = document_title(text) if markdown else None
        for n, passage in enumerate(split_document(text, markdown=markdown)):
            _add(ids, texts, first, f"{name}#{n}", passage, f"{f} (passage {n})")
            titles.append(title)
    if not ids:
        raise EpisodeError(f"corpus folder {str(folder)!r} holds no .txt or .md file with text; pass a folder of "
                           "documents or a JSON Lines file of {\"id\", \"text\"} passages.")
    return Corpus(tuple(ids), tuple(texts), str(folder), _titles(titles))


def document_title(text: str) -> str | None:
    """A Markdown document's title: its first level-1 heading (None without one)."""
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading and heading.group(1) == "#":
            return heading.group(2)
    return None


def split_document(text: str, *, markdown: bool = False, max_words: int = MAX_WORDS) -> list[str]:
    """A document's passages: its paragraphs (blank-line separated) packed up to `max_words` words, a longer
    paragraph cut between its sentences (a sentence longer than that is a passage of its own). With `markdown`, the
    first level-1 heading titles every passage ("{title}. {passage}") and every other heading starts a paragraph."""
    title = document_title(text) if markdown else None
    titled = title is None  # the title's own heading is read once, not kept as a paragraph
    paragraphs: list[str] = []
    lines: list[str] = []
    for line in [*text.splitlines(), ""]:
        heading = _HEADING.match(line) if markdown else None
        if heading or not line.strip():
            if lines:
                paragraphs.append(" ".join(lines))
                lines = []
            if heading and not titled and heading.group(1) == "#":
                titled = True
            elif heading:
                paragraphs.append(heading.group(2).rstrip(".:") + ".")  # packed with the paragraphs after it
            continue
        lines.append(line.strip())
    pieces = [s for p in paragraphs for s in (_sentences(p) if len(p.split()) > max_words else [p])]
    out: list[str] = []
    current: list[str] = []
    for piece in pieces:
        if current and len(" ".join([*current, piece]).split()) > max_words:
            out.append(" ".join(current))
            current = []
        current.append(piece)
    if current:
        out.append(" ".join(current))
    return [f"{title}. {p}" if title else p for p in out]


def _sentences(paragraph: str) -> list[str]:
    from qrag.training.data.text_sources import _segmenter

    return [s.strip() for s in _segmenter().segment(paragraph) if s.strip()]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Question:
    """One labelled question: its text, the rows of its supporting passages, its answer and id."""

    question: str
    supporting: tuple[int, ...]
    answer: str | None
    id: str


def read_questions(path: str | Path, corpus: Corpus) -> list[Question]:
    """The questions of a JSON Lines file, their supporting ids resolved against `corpus`.

    Raises:
        FileNotFoundError: the file does not exist.
        EpisodeError: a malformed line, an empty question, a supporting id that names no passage or repeats, a
            question or id that repeats an earlier line's.
    """
    out: list[Question] = []
    first: dict[tuple[str, str], str] = {}
    for lineno, where, rec in iter_json_lines(path, "questions file"):
        if not isinstance(rec, dict):
            raise EpisodeError(f"{where}: expected a question object {{\"question\", \"supporting\"}}, got "
                               f"{type(rec).__name__}.")
        question, support, answer = rec.get("question"), rec.get("supporting"), rec.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise EpisodeError(f"{where}: needs a non-empty 'question', got {question!r:.60}.")
        if not isinstance(support, list) or not support or not all(isinstance(i, (str, int)) for i in support):
            raise EpisodeError(f"{where}: 'supporting' must be a non-empty list of passage ids, got {support!r:.80}.")
        ids = [str(i) for i in support]
        repeated = next((i for i in ids if ids.count(i) > 1), None)
        if repeated is not None:
            raise EpisodeError(f"{where}: supporting id {repeated!r} is listed twice.")
        if answer is not None and not isinstance(answer, str):
            raise EpisodeError(f"{where}: 'answer' must be a string, got {answer!r:.60}.")
        qid = str(rec.get("id") or f"line-{lineno}")
        for what, value in (("id", qid), ("question", question.strip())):
            if (what, value) in first:
                raise EpisodeError(f"{where}: the {what} {value!r:.80} repeats the one at {first[what, value]}.")
            first[what, value] = where
        out.append(Question(question.strip(), tuple(corpus.row(i, where) for i in ids), answer, qid))
    if not out:
        raise EpisodeError(f"questions file {str(path)!r} holds no questions.")
    return out


@lru_cache(maxsize=2)
def _load(path: str, stamp: tuple[int, int]) -> Corpus:
    return read_corpus(path)


@lru_cache(maxsize=2)
def _neighbours(path: str, stamp: tuple[int, int], search: NeighbourSearch) -> Neighbours:
    return search(_load(path, stamp).texts, None, f"corpus {path}")


def _stamp(path: str) -> tuple[int, int]:
    """What identifies a corpus's contents between two reads in one process (a file's or folder's size and time)."""
    p = Path(path).expanduser()
    if not p.exists():
        return (0, 0)
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    return (sum(f.stat().st_size for f in files), max((f.stat().st_mtime_ns for f in files), default=0))


def load_corpus(path: str | Path) -> Corpus:
    """`read_corpus`, read once per process while the files are unchanged."""
    key = str(Path(path).expanduser().resolve())
    return _load(key, _stamp(key))


def iter_corpus(path: str | Path, *, corpus: str | Path, num_distractors: int | None = None, seed: int = 0,
                split: str = "train", neighbours: NeighbourSearch | None = None,
                read: Callable[[str | Path, Corpus], list[Question]] = read_questions) -> Iterator[Episode]:
    """The questions of `path` as episodes over `corpus`, in file order (module docstring); with `num_distractors`,
    their negatives are found by `neighbours` (`qrag.training.search.pool_neighbours`). `read` reads the questions
    (qrag's JSON Lines; `label_formats.read_labels` reads every format teams have).

    Raises:
        FileNotFoundError / EpisodeError: as `read_corpus` and `read_questions`.
        ValueError: a negative `num_distractors`.
    """
    if num_distractors is not None and num_distractors < 0:
        raise ValueError(f"num_distractors must be >= 0 (or None: the whole corpus), got {num_distractors}.")
    key = str(Path(corpus).expanduser().resolve())
    docs = load_corpus(key)
    questions = read(path, docs)
    meta = {"source": "corpus", "corpus": docs.source}
    if num_distractors is None:
        for q in questions:
            yield Episode(q.question, docs.texts, q.supporting, q.answer, q.id, meta)
        return
    search = need_search(neighbours, "corpus")
    rng = random.Random(f"qrag-corpus/{split}/{seed}")
    golds = [list(q.supporting) for q in questions]
    chosen = negatives_for(_neighbours(key, _stamp(key), search), [q.question for q in questions], golds, num_distractors, rng)
    for q, gold, negatives in zip(questions, golds, chosen, strict=True):
        order = gold + negatives
        rng.shuffle(order)
        yield Episode(q.question, tuple(docs.texts[i] for i in order), tuple(order.index(g) for g in gold), q.answer,
                      q.id, {**meta, "pool": len(docs.texts)})
