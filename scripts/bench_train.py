"""Training throughput and peak memory of `Trainer` on the bundled MiniLM, per train_mode, side by side.

    .venv/bin/python scripts/bench_train.py --rollouts 4 --repeats 3 --out results/bench_train.json
    .venv/bin/python scripts/bench_train.py --modes lora,lora:state,lora:state:bf16 --out results/bench_train_levers.json
    .venv/bin/python scripts/bench_train.py --preset babilong-cpu --modes full:state:bf16:1:loop,full:state:bf16:4:fused \
        --rollouts 4 --repeats 3 --out results/bench_train_groups.json   # the main job's update, before and after
    .venv/bin/python scripts/bench_train.py --preset babilong-cpu \
        --modes full:state:no:4:fused:0,full:state:no:4:fused:1,full:state:no:4:fused:2,full:state:no:4:fused:3 \
        --rollouts 4 --repeats 1 --out results/main_job_any_cpu/bench_train_layers_avx2.json  # the top 1-3 on a trunk
    .venv/bin/python scripts/bench_train.py --preset babilong-cpu --modes full:state:bf16:4:fused --profile \
        --rollouts 4 --repeats 3 --out results/bench_train_profile.json  # where the main job's step time goes
    .venv/bin/python scripts/bench_train.py --preset babilong-cpu --modes full:state:bf16:4:fused --flops \
        --mixed-precision bf16 --rollouts 4 --repeats 1 --threads 2 \
        --out experiments/results/bench_train_vs_7e6953e/now/new_1.json # its arithmetic against the CPU's rate
    python scripts/bench_train.py --gpu --preset babilong --mixed-precision bf16 --num-envs 16 \
        --num-sentences 160 --modes lora,top_layers,full --rollouts 3 --repeats 1 --threads 4 \
        --out results/gpu/bench_train_gpu.json                                   # on a CUDA machine

Each (mode, repeat) runs in its own process so peak RSS (and peak GPU memory) is that configuration's own.
Reports the median over repeats of transitions/s (acting + updates) and optimiser steps/s, and the ratio to
the first mode. With a frozen chunk tower (`:state`) every training chunk is embedded once before timing
(`prefill_s`), as the main job does. `real_token_share`: real state tokens over the tokens the update
encodes, padding included, on the last rollout. Default episodes: BabiLong-style bAbI qa1 haystacks of 20
sentences; 8 environments × 4 steps per rollout, minibatch 32, 2 update epochs (the cpu-small preset). With `QRAG_TEXT_PACK` set the
haystacks' background sentences come from that text pack (scripts/gpu/offline.py).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def worker(mode: str, args: argparse.Namespace) -> dict[str, float]:
    import torch

    sys.path.insert(0, str(Path(__file__).parent / "gpu"))
    from offline import maybe_install_text_pack

    from qrag.training.data.build import build_episodes
    from qrag.training.learn.config import load_preset
    from qrag.training.learn.trainer import Trainer
    from qrag.training.search import pool_neighbours

    maybe_install_text_pack()
    torch.set_num_threads(args.threads)
    config = load_preset(args.preset)
    parts = mode.split(":")
    defaults = ["lora", "both", args.mixed_precision, str(config.trainer.length_groups), "fused",
                str(config.trainer.train_layers)]
    train_mode, towers, precision, groups, optimizer, top = parts + defaults[len(parts):]
    train_mode, _, layers = train_mode.partition("=")  # top_layers=6: how many top layers train
    if layers:
        config.model.trainable_layers = int(layers)
    config.model.train_mode = train_mode  # type: ignore[assignment]
    config.model.train_towers = towers  # type: ignore[assignment]
    config.trainer.length_groups = int(groups)
    config.optim.fused = optimizer == "fused"
    config.trainer.train_layers = int(top)
    if args.encoder:
        config.model.encoder = args.encoder
    if args.dropout is not None:
        config.model.dropout = args.dropout
    config.data.num_train, config.data.num_val = 200, 1
    if args.num_sentences:
        config.data.num_sentences = args.num_sentences
    if args.num_envs:
        config.trainer.num_envs = args.num_envs
    config.trainer.cpu = not args.gpu
    config.trainer.mixed_precision = precision  # type: ignore[assignment]
    config.trainer.output_dir = tempfile.mkdtemp()
    train, _ = build_episodes(config.data, neighbours=pool_neighbours)
    trainer = Trainer(config, train)
    prefill = time.perf_counter()
    if trainer.chunk_cache is not None:  # a frozen chunk tower: embed every training chunk once, untimed
        with trainer.accelerator.autocast():
            trainer.chunk_cache.vectors(trainer.online, [c for e in train for c in e.chunks])
    prefill = time.perf_counter() - prefill
    trainer.update(trainer.collect_rollout())  # warm-up (allocations, tokenizer caches)
    profiler = cProfile.Profile() if args.profile else None
    t0, tr0, up0 = time.perf_counter(), trainer.transitions, trainer.updates
    if profiler is not None:
        profiler.enable()
    for _ in range(args.rollouts):
        batch = trainer.collect_rollout()
        trainer.update(batch)
    seconds = time.perf_counter() - t0
    shares = time_shares(profiler, seconds) if profiler is not None else {}
    real_share = real_token_share(trainer, batch)
    arithmetic = step_flops(trainer) if args.flops else {}
    gpu_mb = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else 0.0
    return {
        "peak_gpu_mb": gpu_mb,
        "prefill_s": prefill,
        "real_token_share": real_share,
        "transitions_per_s": (trainer.transitions - tr0) / seconds,
        "optimizer_steps_per_s": (trainer.updates - up0) / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "trainable_params": sum(p.numel() for p in trainer.online.parameters() if p.requires_grad),
        **shares,
        **arithmetic,
    }


def step_flops(trainer: Any) -> dict[str, float]:
    """Floating-point operations per transition of one more rollout and its update (torch's FLOP counter: the
    matrix products), and the rate of one matrix product of the encoder's feed-forward shape in this process,
    at the run's precision: with the timed transitions/s, the share of that rate a training step reaches."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    before = trainer.transitions
    with FlopCounterMode(display=False) as acting:
        batch = trainer.collect_rollout()
    with FlopCounterMode(display=False) as update:
        trainer.update(batch)
    n = trainer.transitions - before
    dim = trainer.online.state_tower.encoder.config.hidden_size
    inner = trainer.online.state_tower.encoder.config.intermediate_size
    device = trainer.accelerator.device
    x, w = torch.randn(1000, dim, device=device), torch.randn(inner, dim, device=device)  # 1 000 tokens
    with trainer.accelerator.autocast(), torch.no_grad():
        for _ in range(5):
            torch.nn.functional.linear(x, w)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start, repeats = time.perf_counter(), 50
        for _ in range(repeats):
            torch.nn.functional.linear(x, w)
        if device.type == "cuda":
            torch.cuda.synchronize()
        rate = 2 * 1000 * dim * inner * repeats / (time.perf_counter() - start)
    return {"gflop_per_transition/acting": acting.get_total_flops() / n / 1e9,
            "gflop_per_transition/update": update.get_total_flops() / n / 1e9, "matmul_gflops": rate / 1e9}


# Where a training step's time goes: (label, file suffix, function) whose cumulative profiled time is reported.
PARTS = (
    ("acting", "training/learn/trainer.py", "collect_rollout"),
    ("acting: state-tower passes", "training/model/qnet.py", "embed_states"),
    ("update", "training/learn/trainer.py", "update"),
    ("update: forward", "training/model/qnet.py", "forward"),
    ("update: backward", "torch/autograd/__init__.py", "backward"),
    ("tokenisation (states and chunks)", "training/model/qnet.py", "tokenize_states"),
    ("hop engine scoring (positions, rotation, masks)", "training/search/hops.py", "q_values"),
)


def time_shares(profiler: cProfile.Profile, seconds: float) -> dict[str, float]:
    """Cumulative time of each of `PARTS` as a share of the timed loop (under the profiler's own overhead)."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}
    out = {}
    for label, suffix, name in PARTS:
        total = sum(v[3] for (file, _, func), v in stats.items() if func == name and file.endswith(suffix))
        out[f"share/{label}"] = total / seconds
    return out


def real_token_share(trainer: Any, batch: dict[str, Any]) -> float:
    """Real state tokens / tokens the update encodes (padding included) over the last rollout's minibatches,
    in the update's order of rows within a minibatch but unshuffled, with the run's `length_groups`."""
    from qrag.training.learn.batching import length_groups

    tc = trainer.config.trainer
    mask = trainer.online.tokenize_states(batch["questions"], batch["rendered"])["attention_mask"]  # (R, L)
    lengths = mask.sum(dim=1).tolist()
    real = padded = 0
    for start in range(0, len(lengths), tc.minibatch_size):
        rows = lengths[start : start + tc.minibatch_size]
        real += sum(rows)
        padded += sum(len(g) * max(rows[i] for i in g) for g in length_groups(rows, tc.length_groups))
    return real / padded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="full,top_layers,lora",
                        help="comma-separated TRAIN_MODE[:TOWERS[:PRECISION[:GROUPS[:OPTIMIZER[:LAYERS]]]]], e.g. "
                             "lora:state:bf16 or top_layers=6:state:bf16 (=N: model.trainable_layers; "
                             "towers both|state, default both; precision no|bf16|fp16, default "
                             "--mixed-precision; GROUPS trainer.length_groups, default the preset's; OPTIMIZER "
                             "fused|loop, AdamW's kernel, default fused; LAYERS trainer.train_layers, the top layers "
                             "trained on a frozen trunk, 0 every layer, default the preset's)")
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="results/bench_train.json")
    parser.add_argument("--preset", default="cpu-small", help="training preset the episodes and settings come from")
    parser.add_argument("--encoder", default=None, help="encoder folder or name (default: the preset's)")
    parser.add_argument("--dropout", type=float, default=None,
                        help="model.dropout for every mode (default: the preset's, the encoder's own when unset)")
    parser.add_argument("--gpu", action="store_true", help="train on the GPU (default: CPU)")
    parser.add_argument("--mixed-precision", default="no", choices=("no", "bf16", "fp16"))
    parser.add_argument("--num-envs", type=int, default=None, help="parallel environments (default: the preset's)")
    parser.add_argument("--num-sentences", type=int, default=None, help="haystack sentences (default: the preset's)")
    parser.add_argument("--profile", action="store_true",
                        help="also report where the timed loop's time goes (share/... keys; cProfile slows it a little)")
    parser.add_argument("--flops", action="store_true",
                        help="also count the arithmetic per transition (one more rollout and update, untimed) and "
                             "the rate of one matrix product of the encoder's shape here: the share of it a step reaches")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return 0
    modes = args.modes.split(",")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.repeats):  # interleave modes so machine noise hits all of them alike
        for mode in modes:
            out = subprocess.run([sys.executable, *sys.argv, "--worker", mode], capture_output=True, text=True)
            if out.returncode:
                sys.stderr.write(out.stderr[-4000:])
                raise SystemExit(f"bench_train: the {mode} worker failed (exit {out.returncode}); its stderr is above.")
            runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    table = {}
    for mode in modes:
        table[mode] = {k: statistics.median(r[k] for r in runs[mode]) for k in runs[mode][0]}
    base = table[modes[0]]["transitions_per_s"]
    print(f"{'mode':<26}{'transitions/s':>15}{'opt steps/s':>13}{'peak RSS MB':>13}{'peak GPU MB':>13}"
          f"{'trainable':>12}{'vs ' + modes[0]:>10}")
    for mode, row in table.items():
        print(f"{mode:<26}{row['transitions_per_s']:>15.1f}{row['optimizer_steps_per_s']:>13.2f}"
              f"{row['peak_rss_mb']:>13.0f}{row['peak_gpu_mb']:>13.0f}{int(row['trainable_params']):>12,}"
              f"{row['transitions_per_s'] / base:>9.2f}x")
        for key, share in row.items():
            if key.startswith("share/"):
                print(f"    {key[len('share/'):]:<52}{100 * share:>6.1f} %")
        if "matmul_gflops" in row:
            per = row["gflop_per_transition/acting"] + row["gflop_per_transition/update"]
            achieved = per * row["transitions_per_s"]
            print(f"    GFLOP per transition: acting {row['gflop_per_transition/acting']:.2f}, update "
                  f"{row['gflop_per_transition/update']:.2f}; {achieved:.0f} GFLOP/s achieved against "
                  f"{row['matmul_gflops']:.0f} for one feed-forward matrix product ({achieved / row['matmul_gflops']:.0%}); "
                  f"at that rate alone: {row['matmul_gflops'] / per:.1f} transitions/s")
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    result = {"command": " ".join(sys.argv), "machine": platform.processor() or platform.machine(), "gpu": gpu,
              "threads": args.threads, "rollouts": args.rollouts, "repeats": args.repeats, "median": table,
              "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
