"""The ordinary-text benchmark's data (docs/BENCHMARKS.md §4e): SQuAD-format files and MultiRC (subtask049).

Importing this needs no torch: `qrag-eval --help` and a bad flag answer before any model library loads.

- **SQuAD format** (`load_squad`; BIG-bench's `squad_shifts/*.json`): every paragraph of the file is a passage of
  one shared pool (identical paragraphs are one passage); each question has one gold paragraph, the one it was
  written on. `num_questions` questions are drawn with a fixed seed.
- **MultiRC** (`load_multirc`; BIG-bench's `natural_instructions/subtask049_multirc_questions_needed_to_answer`):
  each example's input is "Sent 1: ... Sent 2: ... Question: ...", its target the numbers of the sentences the
  question needs. Each question searches its own paragraph's sentences, in reading order, for exactly those.
  Paragraphs split in two by a hash of their first sentence (`paragraph_half`): `int(sha1(first_sentence.encode(
  'utf-8')).hexdigest(), 16) % 2 == 0` is **even** (the half to choose settings on), the rest **odd** (evaluation
  only).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["HALVES", "Half", "MultiRCQuestion", "SquadPool", "load_multirc", "load_squad", "paragraph_half",
           "parse_multirc_input"]

Half = Literal["even", "odd", "all"]
HALVES: tuple[Half, ...] = ("even", "odd", "all")
"""MultiRC paragraphs searched: the even-hash half (choose on it), the odd-hash half (evaluation only), or all."""

_SENT = re.compile(r"Sent\s+(\d+)\s*:\s*")
_QUESTION = re.compile(r"\bQuestion\s*:\s*")


class OrdinaryTextError(ValueError):
    """A data file of the ordinary-text benchmark is missing or malformed; the message names the file and the fix."""


@dataclass(frozen=True)
class SquadPool:
    """One SQuAD-format file as a retrieval benchmark: a pool of passages and questions over it.

    Attributes:
        passages: The distinct paragraphs of the file, in file order.
        questions: The drawn questions, in file order.
        gold: Per question, the row of its paragraph in `passages`.
        ids: Per question, its id in the file.
        total_questions: How many questions the file holds (before drawing).
    """

    passages: tuple[str, ...]
    questions: tuple[str, ...]
    gold: tuple[int, ...]
    ids: tuple[str, ...]
    total_questions: int


@dataclass(frozen=True)
class MultiRCQuestion:
    """One MultiRC question: its paragraph's sentences in reading order and the (0-based) rows it needs."""

    id: str
    question: str
    sentences: tuple[str, ...]
    supporting: tuple[int, ...]


def _read_json(path: str | Path, what: str) -> Any:
    file = Path(path).expanduser()
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OrdinaryTextError(f"{what} {str(file)!r} cannot be read as JSON ({type(e).__name__}: {e}); pass "
                                f"the file itself (BIG-bench's benchmark_tasks/...).") from None


def load_squad(path: str | Path, num_questions: int | None = 500, seed: int = 0) -> SquadPool:
    """A SQuAD-format file's paragraphs as one pool and `num_questions` of its questions drawn with `seed`.

    Args:
        path: A JSON file `{"data": [{"paragraphs": [{"context": str, "qas": [{"id", "question"}, ...]}]}]}`.
        num_questions: Questions drawn (without replacement, `random.Random(seed).sample`, kept in file order);
            None or at least the file's count: every question.
        seed: The draw's seed.

    Raises:
        OrdinaryTextError: the file is unreadable, not SQuAD format, or holds no question.
    """
    raw = _read_json(path, "SQuAD file")
    data = raw.get("data") if isinstance(raw, dict) else None
    if not isinstance(data, list):
        raise OrdinaryTextError(f"SQuAD file {str(path)!r} has no top-level 'data' list; pass a SQuAD-format file "
                                "({'data': [{'paragraphs': [{'context', 'qas'}]}]}).")
    rows: dict[str, int] = {}
    found: list[tuple[str, str, int]] = []  # (id, question, gold row)
    for article in data:
        for para in article.get("paragraphs", []) if isinstance(article, dict) else []:
            context = para.get("context") if isinstance(para, dict) else None
            if not isinstance(context, str) or not context.strip():
                continue
            row = rows.setdefault(context, len(rows))
            for qa in para.get("qas", []):
                question = qa.get("question") if isinstance(qa, dict) else None
                if isinstance(question, str) and question.strip():
                    found.append((str(qa.get("id", len(found))), question.strip(), row))
    if not found:
        raise OrdinaryTextError(f"SQuAD file {str(path)!r} holds no paragraph with a question; pass a SQuAD-format "
                                "file.")
    if num_questions is not None and num_questions < 1:
        raise OrdinaryTextError(f"num_questions must be an integer >= 1 or None, got {num_questions!r}.")
    picked = (range(len(found)) if num_questions is None or num_questions >= len(found)
              else sorted(random.Random(seed).sample(range(len(found)), num_questions)))
    chosen = [found[i] for i in picked]
    return SquadPool(tuple(rows), tuple(q for _, q, _ in chosen), tuple(g for _, _, g in chosen),
                     tuple(i for i, _, _ in chosen), len(found))


def paragraph_half(first_sentence: str) -> Literal["even", "odd"]:
    """Which half of MultiRC a paragraph belongs to: 'even' where `int(sha1(first_sentence.encode('utf-8'))
    .hexdigest(), 16) % 2 == 0` (the half settings are chosen on), else 'odd' (evaluation only)."""
    digest = hashlib.sha1(first_sentence.encode("utf-8")).hexdigest()
    return "even" if int(digest, 16) % 2 == 0 else "odd"


def parse_multirc_input(text: str) -> tuple[list[str], str]:
    """The sentences (in order) and the question of a subtask049 input "Sent 1: ... Sent 2: ... Question: ...".

    Raises:
        OrdinaryTextError: no "Sent 1:", sentence numbers out of order, or no "Question:".
    """
    q = list(_QUESTION.finditer(text))
    if not q:
        raise OrdinaryTextError(f"MultiRC input has no 'Question:': {text[:80]!r}")
    body, question = text[: q[-1].start()], text[q[-1].end():].strip()
    marks = list(_SENT.finditer(body))
    if not marks or [int(m.group(1)) for m in marks] != list(range(1, len(marks) + 1)):
        raise OrdinaryTextError(f"MultiRC input's sentences are not 'Sent 1: ... Sent 2: ...' in order: {text[:80]!r}")
    sentences = [body[m.end(): (marks[i + 1].start() if i + 1 < len(marks) else len(body))].strip()
                 for i, m in enumerate(marks)]
    return sentences, question


def _targets(target: Any) -> list[int]:
    texts = target if isinstance(target, list) else [target]
    return sorted({int(n) for t in texts for n in re.findall(r"\d+", str(t))})


def load_multirc(path: str | Path, half: Half = "even", num_questions: int | None = None,
                 seed: int = 0) -> list[MultiRCQuestion]:
    """MultiRC questions of one half of the paragraphs (`paragraph_half`), each with its paragraph's sentences.

    A paragraph's half is decided from its first sentence before anything else of it is read, so the odd half is
    never looked at when `half='even'`. Examples whose target names a sentence the input does not hold are skipped.

    Args:
        path: BIG-bench's `task.json` of subtask049 (`{"examples": [{"input", "target"}]}`).
        half: 'even' (choose on it), 'odd' (evaluation only) or 'all'.
        num_questions: Questions drawn with `seed` (kept in file order); None: all of the half.

    Raises:
        OrdinaryTextError: an unreadable file, an unknown half, or no question in the half.
    """
    if half not in HALVES:
        raise OrdinaryTextError(f"half must be one of {list(HALVES)}, got {half!r}.")
    raw = _read_json(path, "MultiRC task file")
    examples = raw.get("examples") if isinstance(raw, dict) else None
    if not isinstance(examples, list):
        raise OrdinaryTextError(f"MultiRC task file {str(path)!r} has no 'examples' list; pass BIG-bench's "
                                "subtask049 task.json.")
    out: list[MultiRCQuestion] = []
    for i, ex in enumerate(examples):
        text = ex.get("input") if isinstance(ex, dict) else None
        if not isinstance(text, str):
            continue
        first = _SENT.search(text)
        second = _SENT.search(text, first.end()) if first else None
        if first is None:
            continue
        head = text[first.end(): second.start() if second else len(text)]
        head = head[: m.start()] if (m := _QUESTION.search(head)) else head
        if half != "all" and paragraph_half(head.strip()) != half:
            continue  # the other half is not parsed
        sentences, question = parse_multirc_input(text)
        needed = _targets(ex.get("target"))
        if not needed or not all(1 <= n <= len(sentences) for n in needed):
            continue
        out.append(MultiRCQuestion(str(i), question, tuple(sentences), tuple(n - 1 for n in needed)))
    if not out:
        raise OrdinaryTextError(f"MultiRC task file {str(path)!r} holds no usable question in the {half!r} half.")
    if num_questions is not None and num_questions < len(out):
        keep = sorted(random.Random(seed).sample(range(len(out)), num_questions))
        out = [out[i] for i in keep]
    return out


def paragraphs(questions: Sequence[MultiRCQuestion]) -> int:
    """How many distinct paragraphs the questions search."""
    return len({q.sentences for q in questions})
