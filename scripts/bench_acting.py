"""Acting's transitions per minute and the TD loss of the first updates on a fixed seed, under state anchor 'question'.

    python scripts/bench_acting.py --top 0 --out results/query_cost/acting_top0.json
    python scripts/bench_acting.py --top 2 --out results/query_cost/acting_top2.json   # trainer.train_layers=2

The `cpu-small` preset (bAbI qa1 haystacks of 20 sentences, 4 hops) with the state tower training and the question
anchor (`f_0(q) + f_θ(s) − f_0(s)`, as `qrag/hotpotqa-minilm` was trained), 24 training episodes, 8 environments,
fp32, one intra-op thread: `--rollouts` rollouts, each followed by its update. Acting's time is `collect_rollout`'s
alone; the TD losses are each update's `losses/td_loss`, which a change to how acting encodes states must leave
equal (to float rounding) on the same seed. Writes JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from qrag.training.data.build import build_episodes
from qrag.training.learn.config import load_preset
from qrag.training.learn.trainer import Trainer
from qrag.training.search import pool_neighbours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=0, help="trainer.train_layers (0: every layer trains)")
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("results/query_cost/acting.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = load_preset("cpu-small")
    config.model.train_towers, config.model.state_anchor = "state", "question"
    config.data.num_train, config.data.num_val = 24, 1
    config.trainer.num_envs, config.trainer.rollout_steps = 8, 4
    config.trainer.mixed_precision = "no"
    config.trainer.train_layers = args.top
    config.trainer.output_dir = tempfile.mkdtemp()
    train, _ = build_episodes(config.data, neighbours=pool_neighbours)
    trainer = Trainer(config, train)
    if trainer.chunk_cache is not None:  # the frozen chunk tower: every chunk embedded once, untimed
        trainer.chunk_cache.vectors(trainer.online, [c for e in train for c in e.chunks])
    losses, acting_s, transitions = [], 0.0, 0
    for _ in range(args.rollouts):
        t0, n0 = time.perf_counter(), trainer.transitions
        batch = trainer.collect_rollout()
        acting_s += time.perf_counter() - t0
        transitions += trainer.transitions - n0
        losses.append(trainer.update(batch)["losses/td_loss"])
    result = {"top": args.top, "rollouts": args.rollouts, "td_losses": losses,
              "acting_transitions_per_min": 60 * transitions / acting_s, "torch": torch.__version__}
    print(json.dumps(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
