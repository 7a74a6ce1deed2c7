"""The learner's levers at equal transitions (or equal time): each variant of a preset trained to the same
number of transitions on the same episodes, with several seeds, scored on the same validation episodes.

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/learner_ablation.py --preset babilong-cpu --transitions 6000 \
        --seeds 0,1 --jobs 2 --threads 1 \
        --variant td= --variant margin=rl.margin_weight=1 --out experiments/results/learner_ablation_margin.json

A variant is `NAME=KEY=VALUE;KEY=VALUE…` over the preset (keys are `section.field` of `qrag-train`, values YAML).
`--minutes M` also stops each run after M minutes (runs in parallel share the machine alike).
Every run starts from the same chunk-vector cache (filled once, before any run), trains in a process of its
own (`--jobs` at a time, `--threads` torch threads each) and logs validation every `--eval-every` transitions:
per-task fact EM at exactly |SF| greedy hops (`eval/sf_em/<task>`, the measure the main job reports).
Prints a table (the best and the last validation per run, and the mean over seeds) and writes JSON with the
command, the machine and every validation point.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import yaml

from qrag.training.data.build import build_episodes
from qrag.training.learn.config import TrainConfig, load_preset
from qrag.training.learn.trainer import Trainer
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorCache


def overrides(spec: str) -> dict[str, Any]:
    """'rl.margin_weight=1;rl.margin=0.1' → the nested dict `TrainConfig.from_dict` reads."""
    out: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        key, _, value = item.partition("=")
        section, _, name = key.strip().partition(".")
        out.setdefault(section, {})[name] = yaml.safe_load(value)
    return out


def run_config(args: argparse.Namespace, spec: str, seed: int, output_dir: str) -> TrainConfig:
    changes = overrides(spec)
    if "seed" in changes.get("trainer", {}):
        raise SystemExit(f"learner_ablation: {spec!r} sets trainer.seed; give seeds with --seeds instead.")
    config = TrainConfig.from_dict(changes, base=load_preset(args.preset))
    t = config.trainer
    t.total_transitions, t.max_minutes, t.seed, t.threads = args.transitions, args.minutes, seed, args.threads
    t.eval_every, t.save_every, t.progress, t.output_dir = args.eval_every, 10**9, False, output_dir
    if args.task:
        config.data.task = args.task
    if args.num_sentences:
        config.data.num_sentences = args.num_sentences
    return config.validate()


def worker(args: argparse.Namespace) -> dict[str, Any]:
    name, spec = args.worker.split("=", 1)
    out = tempfile.mkdtemp(prefix=f"qrag-ablation-{name}-")
    config = run_config(args, spec, args.seed, out)
    train, val = build_episodes(config.data)
    qnet = QNetwork.from_config(config.model)
    store = ChunkVectorCache.load(args.vectors, qnet.chunk_vectors_key()) if qnet.chunk_tower_frozen else None
    start = time.perf_counter()
    Trainer(config, train, val, qnet=qnet, chunk_cache=store).train()
    seconds = time.perf_counter() - start
    evals = [{k.removeprefix("eval/"): v for k, v in json.loads(line).items() if k.startswith("eval/sf_em")
              or k == "transitions"} for line in (Path(out) / "metrics.jsonl").read_text().splitlines()
             if '"eval/sf_em"' in line]
    return {"variant": name, "spec": spec, "seed": args.seed, "seconds": seconds, "evals": evals}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="babilong-cpu")
    parser.add_argument("--task", default=None, help="data.task override (e.g. qa2,qa3)")
    parser.add_argument("--num-sentences", type=int, default=None, help="data.num_sentences override")
    parser.add_argument("--transitions", type=int, default=6000)
    parser.add_argument("--minutes", type=float, default=None,
                        help="also stop each run after this many minutes (equal time rather than equal transitions)")
    parser.add_argument("--eval-every", type=int, default=2000)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--variant", action="append", default=[], help="NAME=KEY=VALUE;KEY=VALUE (repeatable)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vectors", default="runs/ablation/chunk_vectors", help="chunk-vector cache (filled once)")
    parser.add_argument("--out", default="experiments/results/learner_ablation.json")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if not args.variant:
        parser.error("give at least one --variant NAME=SPEC (SPEC may be empty: the preset itself).")
    probe_config = run_config(args, "", 0, tempfile.mkdtemp())
    train, val = build_episodes(probe_config.data)
    probe = QNetwork.from_config(probe_config.model)
    if probe.chunk_tower_frozen:
        store = (ChunkVectorCache.load(args.vectors, probe.chunk_vectors_key()) if Path(args.vectors).exists()
                 else ChunkVectorCache(probe.chunk_vectors_key()))
        torch.set_num_threads(args.jobs * args.threads)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=probe_config.trainer.mixed_precision == "bf16"):
            store.vectors(probe, [c for e in train + val for c in e.chunks], show_progress=True)
        store.save(args.vectors)
    del probe
    jobs = [(v, s) for v in args.variant for s in (int(x) for x in args.seeds.split(","))]
    passthrough = [a for a in sys.argv[1:]]

    def launch(job: tuple[str, int]) -> dict[str, Any]:
        variant, seed = job
        proc = subprocess.run([sys.executable, __file__, *passthrough, "--worker", variant, "--seed", str(seed)],
                              capture_output=True, text=True)
        if proc.returncode:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"learner_ablation: {variant} seed {seed} failed (exit {proc.returncode}).")
        row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        return row

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(launch, jobs))
    tasks = sorted(k.removeprefix("sf_em/") for k in rows[0]["evals"][-1] if k.startswith("sf_em/"))
    print(f"\n{'variant':<16}{'seed':>5}  " + "".join(f"{t:>7}" for t in tasks) + f"{'mean':>7}{'best':>7}{'min':>6}")
    for row in rows:
        last, best = row["evals"][-1], max(e["sf_em"] for e in row["evals"])
        print(f"{row['variant']:<16}{row['seed']:>5}  " + "".join(f"{last['sf_em/' + t]:>7.2f}" for t in tasks)
              + f"{last['sf_em']:>7.3f}{best:>7.3f}{row['seconds'] / 60:>6.1f}")
    result = {"command": " ".join(["python", "experiments/learner_ablation.py", *passthrough]),
              "machine": f"{platform.processor() or platform.machine()}, {args.jobs} runs at a time, "
                         f"{args.threads} torch thread(s) each", "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
