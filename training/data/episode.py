"""The `Episode`: one question, its chunks in document order, and the gold supporting-chunk indices.

Every data source (generators and loaders in `qrag.training.data`) produces episodes; the environment, the
trainer, the searcher and the evaluation consume them. The custom JSON Lines format of BENCHMARKS.md §5
is the episode's on-disk form:

    {"id": str, "question": str, "chunks": [str, ...], "supporting": [int, ...], "answer": str?}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


class EpisodeError(ValueError):
    """An episode (or a line of an episode file) is malformed; the message names the value and the fix."""


@dataclass(frozen=True)
class Episode:
    """One retrieval task.

    Args:
        question: The question text.
        chunks: The chunks in document order (one sentence, one paragraph, ...).
        supporting: Indices into `chunks` of the gold supporting chunks (`SF` in METHOD.md). May be empty
            only for unlabelled episodes (inference); training and fact metrics need at least one.
        answer: The gold answer text, when known.
        id: A stable identifier.
        metadata: Free-form facts about the sample (task, length in tokens, source, ...), JSON-serialisable.

    Example:
        >>> ep = Episode("Where is the milk?", ["Mary took the milk.", "Mary went home."], (0, 1), "home")
        >>> ep.num_chunks
        2
    """

    question: str
    chunks: tuple[str, ...]
    supporting: tuple[int, ...] = ()
    answer: str | None = None
    id: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Accept lists from callers; store tuples so episodes are hashable-ish and immutable.
        object.__setattr__(self, "chunks", tuple(self.chunks))
        object.__setattr__(self, "supporting", tuple(int(i) for i in self.supporting))
        where = f"episode {self.id!r}" if self.id else "episode"
        if not isinstance(self.question, str) or not self.question.strip():
            raise EpisodeError(f"{where}: 'question' must be a non-empty string, got {self.question!r}.")
        if not self.chunks:
            raise EpisodeError(f"{where}: 'chunks' is empty; an episode needs at least one chunk.")
        for i, c in enumerate(self.chunks):
            if not isinstance(c, str):
                raise EpisodeError(f"{where}: chunk {i} must be a string, got {type(c).__name__}.")
        n = len(self.chunks)
        bad = [i for i in self.supporting if not 0 <= i < n]
        if bad:
            raise EpisodeError(
                f"{where}: supporting index {bad[0]} is outside the chunks (there are {n}, indices 0..{n - 1})."
            )
        if len(set(self.supporting)) != len(self.supporting):
            raise EpisodeError(f"{where}: supporting indices repeat: {list(self.supporting)}.")

    @property
    def num_chunks(self) -> int:
        return len(self.chunks)

    def to_json(self) -> dict[str, Any]:
        """The custom-format record (keys in a fixed order so files are byte-stable)."""
        rec: dict[str, Any] = {
            "id": self.id,
            "question": self.question,
            "chunks": list(self.chunks),
            "supporting": list(self.supporting),
        }
        if self.answer is not None:
            rec["answer"] = self.answer
        if self.metadata:
            rec["metadata"] = dict(self.metadata)
        return rec

    @classmethod
    def from_json(cls, rec: Any, *, where: str = "record") -> Episode:
        """Build an episode from a custom-format record; errors name `where` (e.g. 'file.jsonl:12')."""
        if not isinstance(rec, dict):
            raise EpisodeError(f"{where}: expected a JSON object, got {type(rec).__name__}.")
        missing = [k for k in ("question", "chunks") if k not in rec]
        if missing:
            raise EpisodeError(f"{where}: missing required key(s) {missing}; see the custom format in the README.")
        unknown = sorted(set(rec) - {"id", "question", "chunks", "supporting", "answer", "metadata"})
        if unknown:
            raise EpisodeError(
                f"{where}: unknown key(s) {unknown}; allowed: id, question, chunks, supporting, answer, metadata."
            )
        if not isinstance(rec["chunks"], list):
            raise EpisodeError(f"{where}: 'chunks' must be a list of strings, got {type(rec['chunks']).__name__}.")
        supporting = rec.get("supporting", [])
        if not isinstance(supporting, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in supporting
        ):
            raise EpisodeError(f"{where}: 'supporting' must be a list of integers, got {supporting!r}.")
        answer = rec.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise EpisodeError(f"{where}: 'answer' must be a string, got {type(answer).__name__}.")
        try:
            return cls(
                question=rec["question"],
                chunks=tuple(rec["chunks"]),
                supporting=tuple(supporting),
                answer=answer,
                id=str(rec.get("id", "")),
                metadata=dict(rec.get("metadata") or {}),
            )
        except EpisodeError as e:
            # The location replaces the generic "episode" prefix: "file.jsonl:3: supporting index ...".
            raise EpisodeError(f"{where}: {str(e).removeprefix('episode: ')}") from None


def iter_jsonl(path: str | Path) -> Iterator[Episode]:
    """Stream episodes from a custom-format JSON Lines file; blank lines are skipped.

    Raises:
        FileNotFoundError: the file does not exist.
        EpisodeError: a line is not valid JSON or not a valid episode (the message gives file and line).
    """
    p = Path(path)
    for lineno, where, rec in iter_json_lines(p, "episode file"):
        ep = Episode.from_json(rec, where=where)
        if not ep.id:
            ep = Episode(ep.question, ep.chunks, ep.supporting, ep.answer, f"{p.stem}-{lineno}", ep.metadata)
        yield ep


def iter_json_lines(path: str | Path, kind: str = "file") -> Iterator[tuple[int, str, Any]]:
    """Yield `(line number, "file:line", parsed JSON)` for every non-blank line of a JSON Lines file.

    Raises:
        FileNotFoundError: the file does not exist (the message calls it `kind`).
        EpisodeError: a line is not valid JSON (the message gives file and line).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{kind} {str(p)!r} does not exist (or is not a file).")
    with open_utf8(p) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{p}:{lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise EpisodeError(f"{where}: malformed JSON ({e.msg} at column {e.colno}).") from None
            yield lineno, where, rec


@contextmanager
def open_utf8(path: str | Path) -> Iterator[Iterator[str]]:
    """The lines of a UTF-8 text file; a byte that is not UTF-8 raises `EpisodeError` naming file and line."""
    p = Path(path)
    with p.open("rb") as f:
        yield _decoded_lines(f, p)


def _decoded_lines(f: IO[bytes], p: Path) -> Iterator[str]:
    for lineno, raw in enumerate(f, start=1):
        yield _decode(raw, p, lineno).replace("\r\n", "\n")


def read_utf8(path: str | Path) -> str:
    """A whole UTF-8 text file; a byte that is not UTF-8 raises `EpisodeError` naming file and line."""
    p = Path(path)
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise EpisodeError(f"{p}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}); save the file as UTF-8.") from None


def _decode(raw: bytes, p: Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EpisodeError(f"{p}:{lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                           "save the file as UTF-8.") from None


def read_jsonl(path: str | Path) -> list[Episode]:
    """Read every episode of a custom-format JSON Lines file (see `iter_jsonl`)."""
    return list(iter_jsonl(path))


def write_jsonl(episodes: Iterable[Episode], path: str | Path) -> int:
    """Write episodes in the custom format, atomically (temp file then rename). Returns the count."""
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(21, "is a folder; pass a file name such as out.jsonl", str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    n = 0
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for ep in episodes:
                f.write(json.dumps(ep.to_json(), ensure_ascii=False) + "\n")
                n += 1
        tmp.replace(p)
    except BaseException:
        tmp.unlink(missing_ok=True)  # nothing half-written is left behind
        raise
    return n
