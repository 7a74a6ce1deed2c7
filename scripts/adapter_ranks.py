"""How small a full fine-tune can be shipped: held-out fact EM of its low-rank adapters against the rank.

    OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 .venv/bin/python scripts/adapter_ranks.py runs/demo30/train/best \
        --ranks 4,8,16,32,64 --chunk-vectors runs/demo30/chunk_vectors --out results/adapter_ranks.json

The full model and `qrag.training.model.compress.low_rank_adapters` at each rank answer the same BabiLong-style test
samples (qrag-eval's: split `test`, seed 0, `--num-samples` per task, qa1–qa5 at `--lengths`) with exactly
|SF| hops ('qrag') and with the stop rule ('qrag+stop', the model's saved threshold, at most `--max-hops`), in fp32. Prints a
table and writes JSON with the command and machine. `--chunk-vectors` (a `ChunkVectorCache` folder of the
same chunk tower, e.g. the main job's) saves re-embedding the haystacks for a frozen chunk tower.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from qrag.eval.baselines import NEEDS_CHECKPOINT, make_retrievers
from qrag.eval.runner import run
from qrag.eval.sweep import RunConfig
from qrag.training.model.compress import low_rank_adapters
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorCache

TASKS = ("qa1", "qa2", "qa3", "qa4", "qa5")


def score(qnet: QNetwork, args: argparse.Namespace, stores: list[ChunkVectorCache], out: Path) -> dict[str, dict]:
    """Mean fact EM per method and task (and over tasks) on the test samples."""
    cfg = RunConfig(benchmark="babilong", out=out, methods=NEEDS_CHECKPOINT, tasks=TASKS, lengths=tuple(args.lengths),
                    num_samples=args.num_samples, progress=False).validate()
    with torch.no_grad():
        summary = run(cfg, retrievers=make_retrievers(cfg.methods, checkpoint=qnet, max_hops=args.max_hops,
                                                      chunk_caches=stores))
    result: dict[str, dict] = {}
    for method in cfg.methods:
        per_task = {}
        for task in TASKS:  # the mean over lengths of each cell's mean (every cell has num_samples samples)
            values = [c["fact_em"] for c in summary["cells"] if c["method"] == method and c["task"] == task]
            per_task[task] = sum(values) / len(values)
        result[method] = {"mean": sum(per_task.values()) / len(per_task), **per_task}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a full fine-tune's checkpoint folder")
    parser.add_argument("--ranks", default="4,8,16,32,64")
    parser.add_argument("--lengths", default="1k", type=lambda s: [x for x in s.split(",") if x])
    parser.add_argument("--num-samples", type=int, default=200)
    parser.add_argument("--max-hops", type=int, default=4)
    parser.add_argument("--chunk-vectors", default=None, help="a ChunkVectorCache folder of the frozen chunk tower")
    parser.add_argument("--out", default="results/adapter_ranks.json")
    args = parser.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    trained = QNetwork.from_pretrained(args.checkpoint)
    stores = [ChunkVectorCache.load(Path(args.chunk_vectors), trained.chunk_vectors_key())] if args.chunk_vectors else []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        rows.append({"rank": "full", "parameters": sum(p.numel() for p in trained.state_tower.parameters()),
                     **score(trained, args, stores, Path(tmp) / "full")})
        print(f"full model scored in {time.perf_counter() - start:.0f} s", flush=True)
        for rank in ranks:
            small, report = low_rank_adapters(trained, rank)
            rows.append({"rank": rank, "parameters": report.adapter_parameters,
                         "min_energy_kept": report.min_energy_kept, "dropped_fraction": report.dropped_fraction,
                         **score(small, args, stores, Path(tmp) / f"r{rank}")})
            print(f"rank {rank} scored", flush=True)
    print(f"\nfact EM on {args.num_samples} test samples per task at {','.join(args.lengths)} (fp32):")
    print(f"{'rank':>6}{'params':>12}{'MB fp32':>9}{'energy':>8}" + "".join(f"{m:>11}" for m in NEEDS_CHECKPOINT)
          + "".join(f"{'stop ' + t:>9}" for t in TASKS))
    for row in rows:
        energy = f"{row['min_energy_kept']:.3f}" if "min_energy_kept" in row else "-"
        print(f"{row['rank']:>6}{row['parameters']:>12,}{row['parameters'] * 4 / 2**20:>9.1f}{energy:>8}"
              + "".join(f"{row[m]['mean']:>11.3f}" for m in NEEDS_CHECKPOINT)
              + "".join(f"{row['qrag+stop'][t]:>9.3f}" for t in TASKS))
    payload = {"command": " ".join(["python", *sys.argv]), "machine": f"{platform.processor() or platform.machine()}, "
               f"{torch.get_num_threads()} threads, torch {torch.__version__}", "checkpoint": args.checkpoint,
               "lengths": args.lengths, "num_samples": args.num_samples, "max_hops": args.max_hops, "rows": rows}
    Path(args.out).write_text(json.dumps(payload, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
