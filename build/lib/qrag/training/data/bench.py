"""Benchmark (a script, not a test): time and peak memory to build one BabiLong sample per length.

    python -m qrag.training.data.bench --lengths 32k 128k 1M 10M --task qa2 --json bench-data.json

Each length runs in a fresh process (so peak RSS is that build's alone) after the sentence cache has been
prepared once; the preparation time (cold: splitting all text with pysbd; warm: reading the cache) is
reported separately.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence

_ONE = """
import json, resource, sys, time
from qrag.training.data.babilong import generate_babilong
t0 = time.perf_counter()
ep = generate_babilong(sys.argv[1], 1, num_tokens=sys.argv[2], seed=0)[0]
dt = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"length": sys.argv[2], "seconds": round(dt, 2), "peak_rss_mb": round(rss), "chunks": ep.num_chunks,
                  "num_tokens": ep.metadata["num_tokens"]}))
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Print a table of build time and peak memory per length; optionally write JSON."""
    ap = argparse.ArgumentParser(prog="python -m qrag.training.data.bench", description=__doc__)
    ap.add_argument("--lengths", nargs="+", default=["32k", "128k", "1M", "10M"])
    ap.add_argument("--task", default="qa2")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    from qrag.training.data.text_sources import TEXT_SOURCES, sentence_pool

    t0 = time.perf_counter()
    cached = all(sentence_pool(s).cache_file.is_file() for s in TEXT_SOURCES)
    total = sum(sentence_pool(s).split_all() for s in TEXT_SOURCES)
    prep = {"seconds": round(time.perf_counter() - t0, 1), "cache": "warm" if cached else "cold", "sentences": total,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    print(f"sentence cache ({prep['cache']}): {total} sentences in {prep['seconds']}s")
    rows = []
    print(f"{'length':>8} {'chunks':>8} {'tokens':>11} {'seconds':>8} {'peak MB':>8}")
    for length in args.lengths:
        out = subprocess.run([sys.executable, "-c", _ONE, args.task, length], capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['length']:>8} {row['chunks']:>8} {row['num_tokens']:>11} {row['seconds']:>8} {row['peak_rss_mb']:>8}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"task": args.task, "prepare": prep, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
