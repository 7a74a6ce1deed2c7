"""The encoder's attention kernels on a CPU, side by side: torch's scaled-dot-product attention (transformers'
'sdpa', the default) against the plain matmul-softmax-matmul path ('eager'), on the passes qrag runs.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_attention.py --threads 2 --out results/bench_attention.json

Cases (rows x tokens, each row's padding growing down the batch as in a length-sorted batch): an fp32 indexing
batch, one served state (fp32), the main job's acting batch and training minibatch group (bf16 autocast; training
is forward and backward in train mode), and long passages. Median milliseconds of 15 calls after 3 warm-up calls,
the two kernels alternating `--rounds` times in one process; prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

CASES = (  # (label, rows, tokens, mode)
    ("indexing batch, fp32", 128, 32, "fp32"),
    ("one served state, fp32", 1, 40, "fp32"),
    ("acting batch, bf16", 16, 40, "bf16"),
    ("training group, bf16, forward + backward", 16, 40, "train"),
    ("training minibatch, bf16, forward + backward", 64, 40, "train"),
    ("long passages, fp32", 8, 512, "fp32"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="results/bench_attention.json")
    args = parser.parse_args()
    from qrag.training.model.cpu_linear import use_cpu_linears
    from qrag.training.model.encoders import load_encoder

    torch.set_num_threads(args.threads)
    encoder, _ = load_encoder(args.encoder)
    use_cpu_linears(encoder)  # as the towers run it
    gen = torch.Generator().manual_seed(0)

    def timed(kernel: str, rows: int, tokens: int, mode: str) -> float:
        encoder.set_attn_implementation(kernel)
        ids = torch.randint(1000, 20000, (rows, tokens), generator=gen)
        mask = torch.ones(rows, tokens, dtype=torch.long)
        for i in range(rows):  # row i loses i/(2·rows) of its tokens to padding
            mask[i, tokens - i * tokens // (2 * rows) :] = 0

        def call() -> None:
            if mode == "train":
                encoder.train()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
                hidden.float().sum().backward()
                encoder.zero_grad(set_to_none=True)
                encoder.eval()
                return
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
                encoder(input_ids=ids, attention_mask=mask)

        for _ in range(3):
            call()
        times = []
        for _ in range(15):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return 1000 * statistics.median(times)

    rows = []
    for label, n, tokens, mode in CASES:
        ms: dict[str, list[float]] = {"sdpa": [], "eager": []}
        for _ in range(args.rounds):
            for kernel in ms:
                ms[kernel].append(timed(kernel, n, tokens, mode))
        ratio = statistics.median(ms["eager"]) / statistics.median(ms["sdpa"])
        rows.append({"case": label, "rows": n, "tokens": tokens, "mode": mode, "ms": ms, "eager_over_sdpa": ratio})
        print(f"{label:<48}{statistics.median(ms['sdpa']):>10.1f} ms sdpa{statistics.median(ms['eager']):>10.1f} ms "
              f"eager{ratio:>8.2f}x")
    out = {"command": "scripts/bench_attention.py " + " ".join(f"--{k} {v}" for k, v in vars(args).items()),
           "machine": platform.processor() or platform.machine(), "torch": torch.__version__, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
