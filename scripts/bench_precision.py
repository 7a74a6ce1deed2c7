"""Which precision this CPU runs fast: the chunk tower's encoding in fp32 and under bf16 autocast, side by side.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_precision.py --out results/main_job_any_cpu/precision_native.json
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_precision.py \\
        --out results/main_job_any_cpu/precision_avx2.json     # an AVX2-only CPU, emulated on one that has more

Encodes batches of `--batch` background sentences (32 tokens, as the main job) with the base MiniLM, alternating
fp32 and bf16 autocast `--repeats` times after one warm-up each; prints the median seconds per batch, their ratio,
and what `precision="auto"` chooses here and why (`qrag.training.model.precision`); writes JSON. On a CPU without native
bf16 (no avx512_bf16 / amx_bf16, or a process kept below them) bf16 is emulated and slower than fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

import torch

from qrag.training.data.text_sources import background_sentences
from qrag.training.model.precision import NATIVE_BF16_FLAGS, choose_precision, cpu_flags
from qrag.training.model.qnet import QNetwork


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="results/main_job_any_cpu/precision.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = QNetwork.from_encoder(args.encoder, max_chunk_tokens=32).eval()
    texts = background_sentences(args.batch * (args.repeats + 1), random.Random(0))
    cpu = torch.device("cpu")
    seconds: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for r in range(args.repeats + 1):  # round 0 warms up both
        batch = texts[r * args.batch:(r + 1) * args.batch]
        for precision in seconds:
            start = time.perf_counter()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                model.chunk_tower(**model.tokenize_chunks(batch))
            if r:
                seconds[precision].append(time.perf_counter() - start)
    median = {p: statistics.median(v) for p, v in seconds.items()}
    chosen, why = choose_precision("auto", cpu)
    result = {
        "command": "python scripts/bench_precision.py " + " ".join(f"--{k} {v}" for k, v in vars(args).items()),
        "env": {k: os.environ.get(k) for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")},
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                    "torch": torch.__version__, "torch_capability": torch.backends.cpu.get_cpu_capability(),
                    "bf16_flags": sorted(set(NATIVE_BF16_FLAGS) & cpu_flags())},
        "seconds_per_batch": {p: [round(s, 4) for s in v] for p, v in seconds.items()},
        "median_s": {p: round(s, 4) for p, s in median.items()},
        "bf16_over_fp32": round(median["bf16"] / median["fp32"], 3),
        "auto_chooses": chosen, "why": why,
    }
    print(f"{'precision':<10} {'s per batch of ' + str(args.batch):>20}")
    for p, s in median.items():
        print(f"{p:<10} {s:>20.3f}")
    print(f"bf16 / fp32: {result['bf16_over_fp32']:.2f}x the time; precision='auto' runs {chosen} ({why})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
