"""Can the main job's network represent the hard hops? Train it with a plain supervised signal and see.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/supervised_bound.py --loss ce --updates 200 \
        --out results/supervised_bound_ce.json

The network is the `babilong-cpu` preset's (frozen MiniLM chunk tower, relative positions, scale 5, the state
tower trained in full) on its qa2+qa3 episodes (160 sentences). Each update draws `--batch` states on the gold
chain (an episode, then a random subset of its supporting facts as already taken, rendered in document
order) and asks the Q-values of every available chunk to rank the supporting facts not yet taken first:
`ce` = cross-entropy of `softmax(Q / T)` onto them, `margin` = `qrag.training.td.margin_loss` alone (no TD).
Every `--eval-every` updates: validation fact EM at exactly |SF| greedy hops per task (the main job's
measure). If this reaches high fact EM in a few hundred updates while soft Q(λ) does not, the network is not
what limits learning; the learning signal is (docs/LEARNER.md).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import torch

from qrag.training import td
from qrag.training.chunk_vectors import ChunkVectorCache
from qrag.training.config import load_preset
from qrag.training.data.build import build_episodes
from qrag.training.policy import evaluate
from qrag.training.positions import relative_positions
from qrag.training.qnet import QNetwork
from qrag.training.selection import evaluate_at_sf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="qa2,qa3")
    parser.add_argument("--loss", choices=("ce", "margin"), default="ce")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--temperature", type=float, default=0.1, help="T of the cross-entropy")
    parser.add_argument("--margin", type=float, default=0.1)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="results/supervised_bound.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_preset("babilong-cpu")
    config.data.task, config.data.num_train, config.data.num_val = args.tasks, 2000, 100
    train, val = build_episodes(config.data)
    qnet = QNetwork.from_config(config.model)
    store = ChunkVectorCache(qnet.chunk_vectors_key())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        store.vectors(qnet, sorted({c for e in train + val for c in e.chunks}), batch_size=256)
    params = [p for p in qnet.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
    rng = random.Random(0)

    def validate() -> dict[str, float]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return evaluate_at_sf(evaluate, qnet, val, config.env, num_envs=64, batch_size=128, store=store)

    curve = [{"updates": 0, "seconds": 0.0, **validate()}]
    print(json.dumps(curve[-1]), flush=True)
    start = time.perf_counter()
    for update in range(1, args.updates + 1):
        qnet.train()
        eps = [rng.choice(train) for _ in range(args.batch)]
        taken = [rng.sample(list(ep.supporting), rng.randrange(len(ep.supporting))) for ep in eps]
        n = max(ep.num_chunks for ep in eps)
        selected = torch.zeros(len(eps), n, dtype=torch.bool)  # (B, N)
        valid = torch.zeros_like(selected)  # (B, N)
        gold = torch.zeros_like(selected)  # (B, N)
        vectors = torch.zeros(len(eps), n, qnet.dim)  # (B, N, D)
        for b, (ep, sel) in enumerate(zip(eps, taken, strict=True)):
            valid[b, : ep.num_chunks] = True
            selected[b, sel] = True
            gold[b, [i for i in ep.supporting if i not in sel]] = True
            vectors[b, : ep.num_chunks] = store.vectors(qnet, ep.chunks)
        available = valid & ~selected  # (B, N)
        inputs = qnet.tokenize_states([ep.question for ep in eps],
                                      [[ep.chunks[i] for i in sorted(sel)] for ep, sel in zip(eps, taken, strict=True)])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            states = qnet.state_vectors(inputs)  # (B, D)
        q = qnet.score(states, vectors, relative_positions(selected, valid))  # (B, N)
        if args.loss == "ce":
            logits = q.masked_fill(~available, float("-inf")) / args.temperature  # (B, N)
            loss = (logits.logsumexp(-1) - logits.masked_fill(~gold, float("-inf")).logsumexp(-1)).mean()
        else:
            loss = td.margin_loss(q, available, gold, args.margin)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 2.0)
        opt.step()
        if update % args.eval_every == 0:
            curve.append({"updates": update, "seconds": time.perf_counter() - start, **validate()})
            print(json.dumps(curve[-1]), flush=True)
    result = {"command": "python scripts/supervised_bound.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
              "machine": f"{platform.processor() or platform.machine()}, {args.threads} torch thread(s)",
              "states_per_update": args.batch, "curve": curve}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
