"""Write FanOutQA as a team's own data: the Wikipedia summaries as a corpus, its questions as labelled questions.

    python scripts/fanoutqa_own_data.py runs/fanoutqa [--subset 100] [--val-share 0.2]
    python scripts/fanoutqa_own_data.py runs/fanoutqa --dev-only    # corpus.jsonl and dev_questions.jsonl alone

Writes, in the `corpus` source's form (qrag.training.data.corpus; qrag.training.data.fanoutqa says what is kept):
`corpus.jsonl` (the 10 033 summaries); the 298 test questions with two or more evidence pages (they may train) as
`test_train.jsonl` and `test_val.jsonl` (a share held out, drawn with seed 0: what training validates and chooses
on); N of them (drawn with seed 0, for a learning curve) as `test_N_train.jsonl` and `test_N_val.jsonl`; and
`dev_questions.jsonl` (the 122 dev questions: EVALUATION ONLY). With `--dev-only` the test file is not opened
(how `qrag-adapt`, which trains on no question of FanOutQA's, is judged).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from qrag.training.data.fanoutqa import corpus_lines, questions


def write(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    rows = list(rows)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write into (created if missing)")
    parser.add_argument("--subset", type=int, action="append", default=None,
                        help="also write N of the test questions (repeatable; default 100)")
    parser.add_argument("--val-share", type=float, default=0.2, help="share of each question set held out (0.2)")
    parser.add_argument("--dev-only", action="store_true", help="write the corpus and the dev questions alone")
    args = parser.parse_args()
    subsets = args.subset or [100]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.dev_only:
        print(f"corpus.jsonl: {write(args.out / 'corpus.jsonl', corpus_lines())} passages")
        print(f"dev_questions.jsonl: {write(args.out / 'dev_questions.jsonl', questions('dev'))} questions "
              "(evaluation only)")
        return 0
    test = questions("test")
    if any(n < 2 or n > len(test) for n in subsets):
        parser.error(f"--subset must be between 2 and {len(test)}, got {subsets}.")
    if not 0 < args.val_share < 1:
        parser.error(f"--val-share must be between 0 and 1, got {args.val_share}.")
    print(f"corpus.jsonl: {write(args.out / 'corpus.jsonl', corpus_lines())} passages")
    for name, n in [("test", len(test)), *((f"test_{n}", n) for n in subsets)]:
        chosen = random.Random(0).sample(range(len(test)), n)  # the first ones drawn are held out
        held = max(1, round(n * args.val_share))
        val, train = sorted(chosen[:held]), sorted(chosen[held:])
        print(f"{name}_train.jsonl: {write(args.out / f'{name}_train.jsonl', [test[i] for i in train])}, "
              f"{name}_val.jsonl: {write(args.out / f'{name}_val.jsonl', [test[i] for i in val])} questions (may train)")
    print(f"dev_questions.jsonl: {write(args.out / 'dev_questions.jsonl', questions('dev'))} questions "
          "(evaluation only)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
