"""Hop-1 Q gaps on qa2/qa3: how far the first gold fact sits below the best chunk, and how often acting takes it.

For each validation episode the first gold fact is the supporting fact that names the question's object
(qa2's latest get/drop, qa3's latest get/drop): the one hop reachable from the question alone. Reported per
model and task: the top-1 minus top-2 Q gap, the best-minus-gold gap, the gold's rank, and the chance that
Boltzmann acting over the top-k picks it at a given temperature (and with ε over the top-k).

    python experiments/hop1_gaps.py --model untrained --model runs/x/best --tasks qa2 qa3 --num 100 --json experiments/results/hop1_gaps.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch

from qrag.training.learn.config import DataConfig, load_preset
from qrag.training.model.qnet import QNetwork


def first_gold(question: str, chunks: list[str], supporting: tuple[int, ...]) -> int:
    """The supporting chunk that names the question's object ("Where is the O?" / "Where was the O ...")."""
    obj = question.split()[3].rstrip("?")
    hits = [i for i in supporting if f" the {obj}" in chunks[i]]
    return hits[0] if hits else supporting[0]


@torch.no_grad()
def hop1_table(model: QNetwork, episodes: list[Any], alphas: list[float], epsilons: list[float], k: int) -> dict[str, Any]:
    gaps12, gaps_gold, ranks = [], [], []
    p_alpha: dict[float, list[float]] = {a: [] for a in alphas}
    p_eps: dict[float, list[float]] = {e: [] for e in epsilons}
    for ep in episodes:
        chunks = list(ep.chunks)
        g = first_gold(ep.question, chunks, ep.supporting)
        states = model.embed_states([ep.question], [[]])  # (1, D)
        vecs = model.embed_chunks(chunks).unsqueeze(0)  # (1, N, D)
        n = len(chunks)
        pos = model.positions(torch.zeros(1, n, dtype=torch.bool), torch.ones(1, n, dtype=torch.bool))
        q = model.score(states, vecs, pos)[0].float()  # (N,)
        top = q.topk(min(k, n))
        gaps12.append(float(top.values[0] - top.values[1]))
        gaps_gold.append(float(q.max() - q[g]))
        rank = int((q > q[g]).sum()) + 1
        ranks.append(rank)
        for a in alphas:
            w = torch.softmax((top.values - top.values[0]) / a, dim=0)
            p_alpha[a].append(float(w[top.indices == g].sum()))
        for e in epsilons:  # greedy with prob 1-ε, uniform over the top-k with prob ε
            p_eps[e].append((1 - e) * (rank == 1) + e * float((top.indices == g).any()) / len(top.indices))
    second = [i for i, r in enumerate(ranks) if r == 2]
    return {
        "episodes": len(episodes),
        "gap_top1_top2_median": statistics.median(gaps12),
        "gap_best_gold_median": statistics.median(gaps_gold),
        "gap_best_gold_median_when_not_first": statistics.median([x for x in gaps_gold if x > 0] or [0.0]),
        "gold_rank1": sum(r == 1 for r in ranks) / len(ranks),
        "gold_rank2": len(second) / len(ranks),
        "gold_in_topk": sum(r <= k for r in ranks) / len(ranks),
        "p_take_gold_boltzmann": {str(a): statistics.mean(v) for a, v in p_alpha.items()},
        "p_take_gold_boltzmann_when_rank2": {str(a): statistics.mean([v[i] for i in second]) if second else None
                                              for a, v in p_alpha.items()},
        "p_take_gold_eps_topk": {str(e): statistics.mean(v) for e, v in p_eps.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="'untrained' (the preset's model) or a checkpoint")
    ap.add_argument("--preset", default="babilong-cpu")
    ap.add_argument("--tasks", nargs="+", default=["qa2", "qa3"])
    ap.add_argument("--num", type=int, default=100, help="validation episodes per task")
    ap.add_argument("--num-sentences", type=int, default=None, help="haystack length (default: the preset's)")
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.01, 0.05, 0.1])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.3])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_preset(args.preset)
    from qrag.training.data.build import build_episodes

    out: dict[str, Any] = {}
    for name in args.model:
        model = QNetwork.from_config(cfg.model) if name == "untrained" else QNetwork.from_pretrained(name)
        model.eval()
        for task in args.tasks:
            data = DataConfig(source=cfg.data.source, task=task, num_sentences=args.num_sentences or cfg.data.num_sentences,
                              num_train=1, num_val=args.num, seed=cfg.data.seed)
            _, val = build_episodes(data)
            res = hop1_table(model, val, args.alphas, args.epsilons, cfg.rl.top_k)
            out[f"{name}/{task}"] = res
            print(f"{name} {task}: " + json.dumps(res))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
