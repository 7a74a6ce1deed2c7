"""Write FanOutQA as a team's corpus: the Wikipedia summaries, the dev questions as its labels, the test ones to judge.

    python scripts/fanoutqa_own_data.py runs/fanoutqa               # corpus, dev and test questions
    python scripts/fanoutqa_own_data.py runs/fanoutqa --dev-only    # corpus.jsonl and dev_questions.jsonl alone

Writes, in the `corpus` source's form (qrag.training.data.corpus; qrag.training.data.fanoutqa says what is kept):
`corpus.jsonl` (the 10 033 summaries), `dev_questions.jsonl` (the 122 dev questions with two or more evidence pages)
and `test_questions.jsonl` (the 298 test questions with two or more). The dev questions are **a team's labelled
questions** since 2026-12-02 (docs/BENCHMARKS.md §4c): train, tune and select on them. The **test file is EVALUATION
ONLY**: nothing trains, tunes or selects on it (qrag.training.data.evaluation_only knows it by its bytes and its
questions by their text, and `qrag-eval` records each read of it in the ledger). With `--dev-only` the test file is
not opened.

Before the rule, this script also split the test questions into training files (`test_train.jsonl` /
`test_val.jsonl`, `--subset N`, `--val-share`), and one recipe trained and chose on them (2026-11-26,
results/HISTORY.md); it writes them no more, and those flags are refused by name. A team's own labelled questions
train with `qrag-train --data.train_path` or `qrag-adapt --questions` (docs/GUIDE.md).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from qrag.training.data.fanoutqa import corpus_lines, questions

WITHDRAWN = ("--subset", "--val-share")
"""Flags that split FanOutQA's test questions into training files, refused by name."""


def write(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    rows = list(rows)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write into (created if missing)")
    parser.add_argument("--dev-only", action="store_true", help="write the corpus and the dev questions alone")
    for flag in WITHDRAWN:  # known, so that a command from before the rule is refused with the reason
        parser.add_argument(flag, dest=flag[2:].replace("-", "_"), action="append", default=None,
                            help=argparse.SUPPRESS)
    args = parser.parse_args()
    given = [flag for flag in WITHDRAWN if getattr(args, flag[2:].replace("-", "_")) is not None]
    if given:
        parser.error(f"{', '.join(given)} split FanOutQA's test questions into training files; FanOutQA's test "
                     "questions are evaluation only, so this script writes them for evaluation alone "
                     "(test_questions.jsonl). Train on your own labelled questions (FanOutQA's dev questions, "
                     "dev_questions.jsonl, play a team's) with "
                     "qrag-train --data.train_path FILE or qrag-adapt --questions FILE (docs/GUIDE.md).")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"corpus.jsonl: {write(args.out / 'corpus.jsonl', corpus_lines())} passages")
    print(f"dev_questions.jsonl: {write(args.out / 'dev_questions.jsonl', questions('dev'))} questions "
          "(a team's labelled questions: train, tune and select on them)")
    if not args.dev_only:
        print(f"test_questions.jsonl: {write(args.out / 'test_questions.jsonl', questions('test'))} questions "
              "(EVALUATION ONLY: never train, tune or select on them)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
