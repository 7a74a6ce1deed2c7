"""Which CPU training levers keep accuracy: the main job's run against its variants, side by side.

    OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 .venv/bin/python experiments/train_levers.py --minutes 3.5 \
        --variants full:state:bf16,top_layers:state:bf16,lora:both:bf16 --per-task full:state:bf16 \
        --out experiments/results/train_levers.json

Every variant starts from the `babilong-cpu` preset (the main job's), changes only TRAIN_MODE, TOWERS
(`model.train_towers`) and PRECISION (`trainer.mixed_precision`), trains for the same number of transitions
(`--transitions`) or the same wall time (`--minutes`) on the same qa1–qa5 training episodes, each in a process
of its own (accelerate fixes the precision per process), and is scored greedily on the same validation episodes (per task
fact EM, `max_hops` picks). `--per-task V` also trains variant V as five one-task models, each for a fifth of
the transitions, and scores each on its own task: one model for five tasks against one per task at the same
total budget. Frozen-chunk-tower variants share one chunk-vector cache (`--vectors`), filled once before any
timing; run nothing else on the machine when comparing by time.
Prints a table and writes JSON with the command and machine.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from qrag.training.data.build import build_episodes
from qrag.training.data.episode import Episode
from qrag.training.learn.config import TrainConfig, load_preset
from qrag.training.learn.evaluation import evaluate
from qrag.training.learn.trainer import Trainer
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorCache

TASKS = ("qa1", "qa2", "qa3", "qa4", "qa5")


def variant_config(base: TrainConfig, variant: str, transitions: int, minutes: float | None) -> TrainConfig:
    parts = variant.split(":")
    train_mode, towers, precision = parts + ["top_layers", "state", "bf16"][len(parts):]
    config = copy.deepcopy(base)
    config.model.train_mode = train_mode  # type: ignore[assignment]
    config.model.train_towers = towers  # type: ignore[assignment]
    config.trainer.mixed_precision = precision  # type: ignore[assignment]
    if train_mode == "lora":
        config.optim.lr = 5e-4  # the shipped checkpoint's adapter learning rate
    config.trainer.total_transitions = transitions
    config.trainer.max_minutes = minutes
    config.trainer.eval_every = 0
    config.trainer.save_every = 10**9
    config.trainer.progress = False
    config.trainer.output_dir = tempfile.mkdtemp(prefix="qrag-levers-")
    return config.validate()


def by_task(episodes: list[Episode]) -> dict[str, list[Episode]]:
    return {t: [e for e in episodes if e.metadata.get("task") == t] for t in TASKS}


def train_and_score(config: TrainConfig, train: list[Episode], val: dict[str, list[Episode]],
                    store: ChunkVectorCache) -> tuple[dict[str, float], float, int]:
    qnet = QNetwork.from_config(config.model)
    trainer = Trainer(config, train, chunk_cache=store if qnet.chunk_tower_frozen else None, qnet=qnet)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    scores = {}
    with trainer.accelerator.autocast():
        for task, episodes in val.items():
            scores[task] = evaluate(trainer.online, episodes, config.env, store=trainer.chunk_cache)["fact_em"]
    return scores, seconds, trainer.transitions


def worker(args: argparse.Namespace) -> dict[str, object]:
    """One variant (or its per-task form) in this process; returns its row."""
    torch.set_num_threads(args.threads)
    base, train, val = data(args)
    store = ChunkVectorCache.load(args.vectors, QNetwork.from_config(
        dataclasses.replace(base.model, train_towers="state")).chunk_vectors_key())
    variant, per_task = args.worker.removesuffix("@per-task"), args.worker.endswith("@per-task")
    if not per_task:
        config = variant_config(base, variant, args.transitions, args.minutes)
        scores, seconds, done = train_and_score(config, train, by_task(val), store)
    else:
        scores, seconds, done = {}, 0.0, 0
        train_by_task, val_by_task = by_task(train), by_task(val)
        for task in TASKS:
            minutes = args.minutes / len(TASKS) if args.minutes else None
            config = variant_config(base, variant, args.transitions // len(TASKS), minutes)
            s, sec, n = train_and_score(config, train_by_task[task], {task: val_by_task[task]}, store)
            scores.update(s)
            seconds, done = seconds + sec, done + n
    return {"fact_em": scores, "mean": sum(scores.values()) / len(scores), "seconds": seconds,
            "transitions": done, "transitions_per_s": done / seconds}


def data(args: argparse.Namespace) -> tuple[TrainConfig, list[Episode], list[Episode]]:
    base = load_preset("babilong-cpu")
    base.data.num_val, base.data.num_train = args.num_val, args.num_train
    train, val = build_episodes(base.data)
    return base, train, val


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=100_000, help="transitions per variant")
    parser.add_argument("--minutes", type=float, default=None, help="training minutes per variant (equal time)")
    parser.add_argument("--variants", default="full:state:bf16,top_layers:state:bf16,lora:both:bf16")
    parser.add_argument("--per-task", default="", help="variant also trained as five one-task models")
    parser.add_argument("--num-val", type=int, default=250, help="validation episodes (split evenly over tasks)")
    parser.add_argument("--num-train", type=int, default=5000, help="training episodes (split evenly over tasks)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vectors", default="runs/levers/chunk_vectors", help="chunk-vector cache (filled once)")
    parser.add_argument("--out", default="experiments/results/train_levers.json")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    torch.set_num_threads(args.threads)
    base, train, val = data(args)
    probe = QNetwork.from_config(dataclasses.replace(base.model, train_towers="state"))
    store = (ChunkVectorCache.load(args.vectors, probe.chunk_vectors_key()) if Path(args.vectors).exists()
             else ChunkVectorCache(probe.chunk_vectors_key()))
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        store.vectors(probe, [c for e in train + val for c in e.chunks], show_progress=True)
    prefill = time.perf_counter() - t0
    store.save(args.vectors)
    print(f"chunk vectors: {len(store)} distinct texts ({prefill:.0f} s to fill, bf16)", flush=True)
    del probe, store

    names = [v for v in args.variants.split(",") if v] + ([f"{args.per_task}@per-task"] if args.per_task else [])
    rows: dict[str, dict[str, object]] = {}
    for name in names:
        proc = subprocess.run([sys.executable, *sys.argv, "--worker", name], capture_output=True, text=True)
        if proc.returncode:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"train_levers: variant {name} failed (exit {proc.returncode}); its stderr is above.")
        rows[name.replace("@", " ")] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(name, json.dumps(rows[name.replace("@", " ")]), flush=True)

    print(f"\n{'variant':<34}" + "".join(f"{t:>7}" for t in TASKS) + f"{'mean':>7}{'tr/s':>7}{'min':>6}")
    for name, row in rows.items():
        em = row["fact_em"]
        assert isinstance(em, dict)
        print(f"{name:<34}" + "".join(f"{em[t]:>7.3f}" for t in TASKS)
              + f"{row['mean']:>7.3f}{row['transitions_per_s']:>7.1f}{float(row['seconds']) / 60:>6.1f}")  # type: ignore[arg-type]
    result = {"command": " ".join(["python", *sys.argv]),
              "machine": f"{platform.processor() or platform.machine()}, {args.threads} torch threads",
              "val_per_task": {t: len(v) for t, v in by_task(val).items()}, "prefill_s": prefill, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
