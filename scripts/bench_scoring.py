"""One hop's position-aware scoring against its floor (one plain inner-product pass), the state pass, 1-6 hops.

    python scripts/bench_scoring.py --model qrag/babilong-minilm-cpu --threads 2 --out results/bench_scoring.json
    python scripts/bench_scoring.py --device cuda --precision bf16 --index-chunks 200000 --out bench_gpu.json  # GPU
    python scripts/bench_scoring.py --random-minilm --device cuda ...   # MiniLM's shape, random weights

Per corpus size (`--chunks`, default 2 000, 50 000 and 400 000: a 10M-token haystack) the figures of
`qrag.eval.scoring_speed` (its docstring says what each is), medians of `--repeats`; prints a Markdown table and
writes JSON with the machine (CPU flags, threads, torch).
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from qrag.eval.scoring_speed import indexing_rate, random_minilm, scoring_row, scoring_table
from qrag.training.model.precision import speed_flags
from qrag.training.model.shipped import resolve_checkpoint
from qrag.training.search.searcher import load_model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qrag/babilong-minilm-cpu", help="a position-aware checkpoint")
    parser.add_argument("--chunks", default="2000,50000,400000", help="corpus sizes, comma-separated")
    parser.add_argument("--hops", default="1-6", help="hop counts timed, e.g. 1-6 or 1,3")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--index-chunks", type=int, default=0, help="also time indexing this many sentences (0: no)")
    parser.add_argument("--precision", default="fp32",
                        help="indexing and serving precision (fp32, bf16, fp16 on a GPU): the state passes run on a "
                             "copy of the state tower in it (QNetwork.serve_in)")
    parser.add_argument("--random-minilm", action="store_true",
                        help="time a network of MiniLM's shape with random weights instead of --model (same cost)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lo, sep, hi = args.hops.partition("-")
    hops = tuple(range(int(lo), int(hi) + 1)) if sep else tuple(int(h) for h in args.hops.split(","))
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.random_minilm:
        import tempfile

        tokenizer = resolve_checkpoint("qrag/babilong-minilm-cpu") / "tokenizer"
        model = random_minilm(tempfile.mkdtemp(prefix="minilm-shape-"), str(tokenizer)).to(device)
        args.model = "random weights of all-MiniLM-L6-v2's shape"
    else:
        model = load_model(args.model, device=device)
    model = model.eval().serve_in(args.precision)
    rows = []
    for n in (int(x) for x in args.chunks.split(",")):
        rows.append(scoring_row(model, n, repeats=args.repeats, hops=hops, queries=args.queries, device=device))
        print(f"{n} chunks done", flush=True)
    table = scoring_table(rows)
    if args.index_chunks:
        rate = indexing_rate(model, args.index_chunks, args.precision, device)
        table += f"\nindexing {args.index_chunks:,} sentences in {args.precision}: {rate:,.0f} chunks/s\n"
    machine = {"device": str(device), "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
               "cpu_flags": speed_flags(), "threads": torch.get_num_threads(), "torch": torch.__version__,
               "python": platform.python_version()}
    print(table)
    print(json.dumps(machine))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        index = {"chunks": args.index_chunks, "precision": args.precision, "chunks_per_s": rate} if args.index_chunks else None
        args.out.write_text(json.dumps({"model": args.model, "machine": machine, "rows": rows, "indexing": index},
                                       indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
