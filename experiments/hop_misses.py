"""Where a model's greedy hops miss on BabiLong-style validation episodes: the first wrong hop of each miss,
what it took (a move, get or drop, of the gold fact's person or not) and how far from the gold fact.

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/hop_misses.py --model qrag/babilong-minilm-cpu --tasks qa2,qa3 \
        --num 100 --out experiments/results/hop_misses.json

Episodes: the `babilong-cpu` preset's validation split (160 sentences, about 4K tokens), `--num` per task.
Each question gets exactly |SF| greedy hops (the main job's measure); a miss is a question whose hops are not
its supporting facts. For the first hop that took a non-supporting chunk: its hop number, the kind of fact it
is, and, when a supporting fact not taken is about the same person, whether the taken one is earlier or later
in the document and by how many sentences (docs/LEARNER.md, "What bounds qa2 and qa3 at |SF| hops now").
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import statistics
import sys
from pathlib import Path

import torch

from qrag.training.data.babi import parse_fact
from qrag.training.data.build import build_episodes
from qrag.training.learn.config import load_preset
from qrag.training.search.hops import Corpora, greedy_hops
from qrag.training.search.searcher import load_model


def misses(model: str, task: str, num: int) -> dict[str, object]:
    config = load_preset("babilong-cpu")
    config.data.task, config.data.num_train, config.data.num_val = task, 1, num
    _, episodes = build_episodes(config.data)
    qnet = load_model(model)
    qnet.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        vectors = [qnet.embed_chunks(e.chunks, 256) for e in episodes]
        corpora = Corpora.padded(vectors, [e.chunks for e in episodes], torch.device("cpu"))
        hopped = greedy_hops(qnet, [e.question for e in episodes], corpora, [len(e.supporting) for e in episodes],
                             threshold=None, min_hops=0)
    kinds: collections.Counter[str] = collections.Counter()
    distances = []
    for episode, hops in zip(episodes, hopped, strict=True):
        taken = hops.taken
        gold = set(episode.supporting)
        if set(taken) == gold:
            continue
        hop = next(i for i, t in enumerate(taken) if t not in gold)
        wrong = parse_fact(episode.chunks[taken[hop]])
        kind = f"hop {hop + 1}: " + (wrong.kind if wrong else "not a fact")
        same = [g for g in sorted(gold - set(taken))
                if wrong and (fact := parse_fact(episode.chunks[g])) and fact.actor == wrong.actor]
        if same:
            kind += ", same person, " + ("earlier" if taken[hop] < same[0] else "later") + " than the gold fact"
            distances.append(abs(taken[hop] - same[0]))
        kinds[kind] += 1
    return {"episodes": len(episodes), "misses": sum(kinds.values()), "kinds": dict(kinds.most_common()),
            "same_person_distance_sentences": sorted(distances),
            "median_distance": statistics.median(distances) if distances else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qrag/babilong-minilm-cpu")
    parser.add_argument("--tasks", default="qa2,qa3")
    parser.add_argument("--num", type=int, default=100, help="validation episodes per task")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="experiments/results/hop_misses.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {"command": "python experiments/hop_misses.py " + " ".join(sys.argv[1:]),
              "machine": f"{platform.processor() or platform.machine()}, {args.threads} torch thread(s)",
              "tasks": {task: misses(args.model, task, args.num) for task in args.tasks.split(",")}}
    print(json.dumps(result["tasks"], indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
