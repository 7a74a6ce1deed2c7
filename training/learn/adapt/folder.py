"""`qrag-adapt`'s output folder: what a run was asked, which phases it finished and how long each took (resume).

    DIR/model/       the model it ships
    DIR/searcher/    that model with the corpus's index (its vectors, ids and texts: loads with no embedding)
    DIR/report.md    what it did, chose and why (written last)
    DIR/work/        adapt.json (the request and the phases done), vectors/, train.jsonl, val.jsonl, run/

A folder is new (missing or empty), a run of the same request to go on with, or refused: anything else is
somebody's, and nothing is written into it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qrag.training.atomic import write_text_atomic

MAX_QUESTIONS = 4000
"""Most questions built from a corpus by default (a 30-minute CPU run sees about that many episodes)."""
FORMAT = "qrag-adapt"
WORK = "work"
RECORD = "adapt.json"
MODEL = "model"
SEARCHER = "searcher"
REPORT = "report.md"


class AdaptError(ValueError):
    """A request `qrag-adapt` cannot carry out; the message names the value and what to do."""


@dataclass(frozen=True)
class AdaptOptions:
    """The command's arguments (`qrag.training.learn.adapt.cli`)."""

    corpus: str
    out: str
    questions: str | None = None
    init: str = "qrag/hotpotqa-minilm"
    minutes: float = 30.0
    seed: int = 0
    threads: int | None = None
    max_questions: int = MAX_QUESTIONS
    train_layers: int | None = None
    """Top layers of the state tower that train (0: every layer); None: the `corpus-cpu` preset's."""


@dataclass(frozen=True)
class Request:
    """What a run was asked: the same request resumes a run, another one is refused (the budget may change)."""

    corpus: str
    corpus_digest: str
    questions: str | None
    questions_digest: str | None
    init: str
    seed: int
    max_questions: int
    train_layers: int | None = None  # None: the preset's (a record from before the flag reads so)


def digest(texts: Iterable[str]) -> str:
    """A short digest of texts (a corpus's ids and texts, a questions file's lines)."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


@dataclass
class Record:
    """The run's record in DIR/work/adapt.json: its request, the seconds each finished phase took, and facts a
    later phase or the report reads (counts, the horizon, the choice)."""

    request: Request
    seconds: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def spent(self) -> float:
        return sum(self.seconds.values())

    def done(self, phase: str) -> bool:
        return phase in self.seconds


class AdaptFolder:
    """The output folder of one run (module docstring)."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out).expanduser()
        self.work = self.out / WORK
        self.model = self.out / MODEL
        self.searcher = self.out / SEARCHER
        self.report = self.out / REPORT

    def open(self, request: Request) -> Record:
        """The run's record: a fresh one for a new folder, the saved one for a run of the same request.

        Raises:
            AdaptError: the path is a file, the folder holds something else, or a run of another request.
        """
        if self.out.exists() and not self.out.is_dir():
            raise AdaptError(f"--out {str(self.out)!r} is a file; pass a folder (new or empty) for the model and its "
                             "report.")
        record_file = self.work / RECORD
        if record_file.is_file():
            saved = self._read(record_file)
            if saved.request != request:
                differ = [k for k, v in asdict(request).items() if asdict(saved.request).get(k) != v]
                raise AdaptError(f"--out {str(self.out)!r} holds a qrag-adapt run of another request (it differs in "
                                 f"{', '.join(differ)}); pass a new --out, or delete that folder to start again.")
            return saved
        if self.out.is_dir() and any(self.out.iterdir()):
            held = sorted(p.name for p in self.out.iterdir())[:5]
            raise AdaptError(f"--out {str(self.out)!r} already holds files ({', '.join(held)}) and no qrag-adapt run; "
                             "pass a new or empty folder: nothing there is overwritten.")
        return Record(request)

    def save(self, record: Record) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        body = {"format": FORMAT, "request": asdict(record.request), "seconds": record.seconds, "facts": record.facts}
        write_text_atomic(self.work / RECORD, json.dumps(body, indent=1, ensure_ascii=False))

    @contextmanager
    def phase(self, record: Record, name: str) -> Iterator[None]:
        """Time one phase and save it as done when it ends without an error."""
        tick = time.perf_counter()
        yield
        record.seconds[name] = record.seconds.get(name, 0.0) + time.perf_counter() - tick
        self.save(record)

    @staticmethod
    def _read(path: Path) -> Record:
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            if body.get("format") != FORMAT:
                raise ValueError(f"format {body.get('format')!r}")
            return Record(Request(**body["request"]), dict(body["seconds"]), dict(body["facts"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise AdaptError(f"{str(path)!r} is not a readable qrag-adapt record ({e}); delete {str(path.parent)!r} to "
                             "start that run again.") from None
