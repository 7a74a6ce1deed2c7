"""How sure a model is at each hop, by question set: can its stop rule tell text it was not trained for?

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/hop_q_by_set.py --model runs/wiki-fh/best \
        --sets wiki:mix,wiki:single,jsonl:runs/fanoutqa_wiki.jsonl --num 200 --chunk-vectors runs/cv \
        --out experiments/results/hop_q_by_set.json

For each question of each set: `--k` greedy results (the first `max_hops` of them hops, as `qrag-eval` retrieves),
the Q-value of every hop, and the ranking of the first hop's state alone (for a model with
`state_anchor: first_hop` and `normalize: true`, cosine search with the base encoder). Per set it reports the
median and quartiles of the Q-value at each hop, the share of questions the model's saved stop threshold
would stop before each hop, and recall@2/4/8 of the gold chunks for three rankings, paired against the first
hop's ranking with 95% normal intervals:

- `qrag`: the hops, then the best remaining chunks for the last state (what the retrievers return for `k`);
- `first_hop`: the first hop's ranking alone (cosine search, for such a model);
- `fill`: the hops up to the stop rule's point (the saved threshold), then the first hop's ranking: what
  "stop where unsure, fall back to plain dense search" would give.

Sets: `wiki:KIND` (the generated `wiki` source, split test) or `jsonl:PATH` (a corpus-form file of questions
with gold passage ids, e.g. the FanOutQA file of `scripts/fanoutqa_corpus.py`; evaluation only).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from qrag.eval.metrics import recall_at_k
from qrag.training.data import load_episodes
from qrag.training.data.episode import Episode
from qrag.training.model.qnet import QNetwork
from qrag.training.search import hops
from qrag.training.search.chunk_vectors import ChunkVectorCache, ChunkVectorFolder
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import SearchConfig, load_model, search_many

KS = (2, 4, 8)


def set_episodes(spec: str, num: int) -> list[Episode]:
    kind, _, arg = spec.partition(":")
    if kind == "wiki":
        return load_episodes("wiki", task=arg, split="test", num_samples=num, seed=0)
    if kind == "jsonl":
        return load_episodes("jsonl", path=arg, num_samples=num, seed=0)
    raise SystemExit(f"--sets: {spec!r} is neither wiki:KIND nor jsonl:PATH.")


def rankings(qnet: QNetwork, episodes: Sequence[Episode], store: ChunkVectorCache, k: int, horizon: int,
             batch: int = 16) -> list[dict[str, list]]:
    out = []
    for start in range(0, len(episodes), batch):
        group = episodes[start : start + batch]
        indexes = [ChunkIndex(store.vectors(qnet, list(ep.chunks)), list(ep.chunks)) for ep in group]
        questions = [ep.question for ep in group]
        found = search_many(qnet, questions, indexes, SearchConfig(k=k, max_hops=horizon, stop_threshold=None))
        with torch.no_grad():
            first = hops.encode_states(qnet, questions, [[] for _ in group])  # (B, D)
        for ep, index, result, state in zip(group, indexes, found, first, strict=True):
            top = (index.vectors @ state).topk(min(k + horizon, len(ep.chunks))).indices  # (k + horizon,)
            out.append({"gold": list(ep.supporting), "hits": [int(h.chunk.id) for h in result.hits],
                        "q": [h.q_value for h in result.hits[:horizon]], "first_hop": top.tolist()})
    return out


def fill(rec: dict[str, list], threshold: float, k: int) -> list[int]:
    stop = next((i for i, q in enumerate(rec["q"]) if i > 0 and q < threshold), len(rec["q"]))
    kept = rec["hits"][:stop]
    return (kept + [c for c in rec["first_hop"] if c not in kept])[:k]


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    d = [x - y for x, y in zip(a, b, strict=True)]
    half = 1.96 * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
    return {"mean": statistics.mean(a), "vs_first_hop": statistics.mean(d), "ci95": half}


def summarise(recs: list[dict[str, list]], threshold: float, horizon: int, k: int) -> dict[str, object]:
    per_hop = []
    for h in range(horizon):
        qs = sorted(r["q"][h] for r in recs if len(r["q"]) > h)
        if len(qs) > 1:
            quart = statistics.quantiles(qs, n=4)
            per_hop.append({"hop": h + 1, "n": len(qs), "q25": quart[0], "median": quart[1], "q75": quart[2],
                            "below_threshold": sum(q < threshold for q in qs) / len(qs)})
    recall: dict[str, dict[str, object]] = {}
    for at in (x for x in KS if x <= k):
        base = [recall_at_k(r["first_hop"], r["gold"], at) for r in recs]
        recall[f"@{at}"] = {
            "first_hop": statistics.mean(base),
            "qrag": paired([recall_at_k(r["hits"], r["gold"], at) for r in recs], base),
            "fill": paired([recall_at_k(fill(r, threshold, k), r["gold"], at) for r in recs], base),
        }
    return {"questions": len(recs), "q_by_hop": per_hop, "recall": recall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a checkpoint folder or shipped name")
    parser.add_argument("--sets", default="wiki:mix,wiki:single", help="comma-separated wiki:KIND or jsonl:PATH")
    parser.add_argument("--num", type=int, default=200, help="questions per set (default 200)")
    parser.add_argument("--k", type=int, default=8, help="results per question (default 8)")
    parser.add_argument("--chunk-vectors", default=None, help="a chunk-vector folder kept between runs (qrag-eval's)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/hop_q_by_set.json"))
    args = parser.parse_args()
    if args.num < 2 or args.k < 1:
        parser.error(f"--num must be >= 2 and --k >= 1, got {args.num} and {args.k}.")
    if args.threads:
        torch.set_num_threads(args.threads)
    qnet = load_model(args.model)
    horizon, threshold = qnet.hops.max_hops, qnet.hops.stop_threshold
    if threshold is None:
        parser.error(f"{args.model!r} saves no stop threshold; train it with validation so one is calibrated.")
    folder = ChunkVectorFolder(args.chunk_vectors) if args.chunk_vectors else None
    key = qnet.chunk_vectors_key()
    store = folder.get(key) if folder is not None else ChunkVectorCache(key)
    report: dict[str, object] = {
        "command": "python experiments/hop_q_by_set.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
        "model": args.model, "max_hops": horizon, "stop_threshold": threshold, "k": args.k, "sets": {},
    }
    for spec in args.sets.split(","):
        recs = rankings(qnet, set_episodes(spec, args.num), store, args.k, horizon)
        report["sets"][spec] = summary = summarise(recs, threshold, horizon, args.k)  # type: ignore[index]
        hops_line = ", ".join(f"hop {p['hop']} {p['median']:.3f} ({p['below_threshold']:.0%} below)"
                              for p in summary["q_by_hop"])  # type: ignore[attr-defined]
        print(f"{spec}: {summary['questions']} questions; median Q {hops_line}")
        for at, r in summary["recall"].items():  # type: ignore[attr-defined]
            print(f"  recall{at}: first hop {r['first_hop']:.3f} | qrag {r['qrag']['mean']:.3f} "
                  f"({r['qrag']['vs_first_hop']:+.3f} ± {r['qrag']['ci95']:.3f}) | fill {r['fill']['mean']:.3f} "
                  f"({r['fill']['vs_first_hop']:+.3f} ± {r['fill']['ci95']:.3f})")
    if folder is not None:
        folder.save()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
