"""Training throughput and peak memory of `Trainer` on the bundled MiniLM, per train_mode, side by side.

    .venv/bin/python scripts/bench_train.py --rollouts 4 --repeats 3 --out docs/bench_train.json

Each (mode, repeat) runs in its own process so peak RSS is that configuration's own. Reports the median
over repeats of transitions/s (acting + updates) and optimiser steps/s, and the ratio to 'full'.
Episodes: BabiLong-style bAbI qa1 haystacks of 20 sentences; 8 environments × 4 steps per rollout,
minibatch 32, 2 update epochs (the cpu-small preset).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(mode: str, rollouts: int, threads: int) -> dict[str, float]:
    import torch

    from training.cli import build_episodes
    from training.config import load_preset
    from training.trainer import Trainer

    torch.set_num_threads(threads)
    config = load_preset("cpu-small")
    config.model.train_mode = mode  # type: ignore[assignment]
    config.data.num_train, config.data.num_val = 200, 1
    config.trainer.output_dir = tempfile.mkdtemp()
    train, _ = build_episodes(config.data)
    trainer = Trainer(config, train)
    trainer.update(trainer.collect_rollout())  # warm-up (allocations, tokenizer caches)
    t0, tr0, up0 = time.perf_counter(), trainer.transitions, trainer.updates
    for _ in range(rollouts):
        trainer.update(trainer.collect_rollout())
    seconds = time.perf_counter() - t0
    return {
        "transitions_per_s": (trainer.transitions - tr0) / seconds,
        "optimizer_steps_per_s": (trainer.updates - up0) / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "trainable_params": sum(p.numel() for p in trainer.online.parameters() if p.requires_grad),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="full,top_layers,lora")
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="docs/bench_train.json")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.rollouts, args.threads)))
        return 0
    modes = args.modes.split(",")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.repeats):  # interleave modes so machine noise hits all of them alike
        for mode in modes:
            out = subprocess.run([sys.executable, __file__, "--worker", mode, "--rollouts", str(args.rollouts),
                                  "--threads", str(args.threads)], capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    table = {}
    for mode in modes:
        table[mode] = {k: statistics.median(r[k] for r in runs[mode]) for k in runs[mode][0]}
    base = table[modes[0]]["transitions_per_s"]
    print(f"{'mode':<12}{'transitions/s':>15}{'opt steps/s':>13}{'peak RSS MB':>13}{'trainable':>12}{'vs ' + modes[0]:>10}")
    for mode, row in table.items():
        print(f"{mode:<12}{row['transitions_per_s']:>15.1f}{row['optimizer_steps_per_s']:>13.2f}"
              f"{row['peak_rss_mb']:>13.0f}{int(row['trainable_params']):>12,}{row['transitions_per_s'] / base:>9.2f}x")
    result = {"command": " ".join(sys.argv), "machine": platform.processor() or platform.machine(),
              "threads": args.threads, "rollouts": args.rollouts, "repeats": args.repeats, "median": table,
              "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
