"""What a bAbI retriever took instead of a supporting fact, from a `qrag-eval babilong` run.

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/haystack_misses.py results/babilong_10m_cpu/results.jsonl \
        --method qrag --out experiments/results/haystack_misses_10m.json

For every question the method missed at exactly |SF| hops (`fact_em_at_sf` < 1), the haystack is generated
again (the same split, seed and length as the run's records) and each wrong chunk among the first |SF| is
classed: `story fact` (another statement of the story: the wrong one of its facts), `confuser` (background text
that names one of the story's people, rooms or objects: `qrag.training.data.confusers.mentions`) or `other
background`. A question counts once, as `confuser` when any of its wrong chunks is one. Prints the counts per
task and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from qrag.eval.runner import read_results
from qrag.eval.sweep import RunConfig, cell_episodes
from qrag.training.data.babi import parse_fact
from qrag.training.data.confusers import mentions


def miss_kind(chunks: tuple[str, ...], wrong: list[int], story_words: set[str]) -> str:
    kinds = ["story fact" if parse_fact(chunks[i]) else "confuser" if mentions(chunks[i]) & story_words
             else "other background" for i in wrong]
    return "confuser" if "confuser" in kinds else kinds[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a qrag-eval babilong results.jsonl")
    ap.add_argument("--method", default="qrag")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = [r for r in read_results(args.results) if r["method"] == args.method]
    if not rows:
        print(f"no records of method {args.method!r} in {args.results}", file=sys.stderr)
        return 2
    missed: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        if r["fact_em_at_sf"] < 1:
            missed.setdefault((r["task"], r["length"]), {})[r["id"]] = r
    counts: Counter[tuple[str, str, str]] = Counter()
    for (task, length), by_id in sorted(missed.items()):
        settings = next(iter(by_id.values()))["settings"]
        # The run's own cell, rebuilt as the sweep builds it (split, seed, pool): sample i is the same whatever
        # the count, so the first max-index + 1 samples hold every missed one.
        cfg = RunConfig(benchmark="babilong", out=args.results.parent, tasks=(task,), lengths=(length,),
                        seed=settings["seed"], split=settings.get("split", "test"),
                        filler_sentences=settings.get("filler_sentences"),
                        background=settings.get("background")).validate()
        count = max(int(i.rsplit("-", 1)[1]) for i in by_id) + 1
        for ep in cell_episodes(cfg, task, cfg.lengths_resolved[0][1], count):
            rec = by_id.get(ep.id)
            if rec is None:
                continue
            sf = set(ep.supporting)
            wrong = [i for i in rec["retrieved"][: len(sf)] if i not in sf]
            story = set().union(mentions(ep.question), *(mentions(c) for c in ep.chunks if parse_fact(c)))
            counts[(task, length, miss_kind(ep.chunks, wrong, story) if wrong else "too few hops")] += 1
    table = [{"task": t, "length": n, "kind": k, "questions": v} for (t, n, k), v in sorted(counts.items())]
    for row in table:
        print(f"{row['task']} {row['length']:>5} {row['kind']:<17} {row['questions']}")
    total = {k: sum(v for (_, _, kk), v in counts.items() if kk == k) for k in sorted({k for _, _, k in counts})}
    print(f"questions missed: {sum(counts.values())} of {len(rows)}; by kind: {total}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"results": str(args.results), "method": args.method, "records": len(rows),
                                        "by_kind": total, "rows": table}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
