"""Greedy against beam search (`beam_size`) at exactly |SF| hops, on BabiLong-style validation episodes.

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/beam_at_sf.py --model qrag/babilong-minilm-cpu --tasks qa2,qa3 \
        --num 100 --beams 1,2,3,5 --out experiments/results/beam_at_sf.json

Episodes: the `babilong-cpu` preset's validation split (160 sentences, about 4K tokens), `--num` per task, each
its own corpus (`ChunkIndex`, in reading order). Each question is searched by `MultiHopSearcher` with
`k = max_hops = |SF|` and the stop rule off, at every `--beams` width (1 is greedy), with the state passes in
`--precision` (`QNetwork.serve_in`); fact EM: the hops are exactly
the supporting facts. Beam search keeps the sequences with the largest total Q (`training/search/searcher.py`).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

from qrag.training.data.build import build_episodes
from qrag.training.learn.config import load_preset
from qrag.training.model.qnet import QNetwork
from qrag.training.model.towers import PRECISIONS
from qrag.training.search import pool_neighbours
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, load_model


def fact_em(qnet: QNetwork, task: str, num: int, beams: list[int]) -> dict[str, float]:
    config = load_preset("babilong-cpu")
    config.data.task, config.data.num_train, config.data.num_val = task, 1, num
    _, episodes = build_episodes(config.data, neighbours=pool_neighbours)
    hits = dict.fromkeys(beams, 0)
    with torch.no_grad():
        for episode in episodes:
            index = ChunkIndex.from_texts(qnet, list(episode.chunks), show_progress=False, ordered=True)
            searcher = MultiHopSearcher(qnet, index, SearchConfig(stop_threshold=None), ordered=True)
            gold, n = set(episode.supporting), len(episode.supporting)
            for width in beams:
                found = searcher.search_one(episode.question, k=n, max_hops=n, beam_size=width)
                hits[width] += {h.chunk.position for h in found.hits} == gold
    return {f"beam_{w}": hits[w] / len(episodes) for w in beams}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qrag/babilong-minilm-cpu")
    parser.add_argument("--tasks", default="qa2,qa3")
    parser.add_argument("--num", type=int, default=100, help="validation episodes per task")
    parser.add_argument("--beams", default="1,2,3,5", help="beam widths (1: greedy)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="the state passes' serving precision (QNetwork.serve_in; fp16: a GPU only)")
    parser.add_argument("--out", default="experiments/results/beam_at_sf.json")
    args = parser.parse_args()
    beams = [int(b) for b in args.beams.split(",")]
    if args.num < 1 or min(beams) < 1:
        parser.error(f"--num and every --beams width must be >= 1, got {args.num} and {beams}.")
    torch.set_num_threads(args.threads)
    qnet = load_model(args.model, precision=args.precision)
    result = {"command": "python experiments/beam_at_sf.py " + " ".join(sys.argv[1:]),
              "machine": f"{platform.processor() or platform.machine()}, {args.threads} torch thread(s)",
              "fact_em_at_sf_hops": {task: fact_em(qnet, task, args.num, beams) for task in args.tasks.split(",")}}
    print(json.dumps(result["fact_em_at_sf_hops"], indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
