"""What searching long passages by their best window costs: indexing with `long_chunks="windows"` against "cut", and a
search over each index (`ChunkIndex.from_texts`, `MultiHopSearcher`; METHOD.md §4.6).

    python scripts/bench_long_chunks.py --squad amazon_reviews_v1.0.json --out results/long_chunks/bench.json

The passages of a SQuAD-format file (every paragraph; SQuADShifts' amazon_reviews has 273 of 2 050 over 256 tokens)
are indexed both ways, alternately, `--repeats` times; then `--queries` of its questions are searched over each
index with the model's saved settings at k = 5. Medians and their ratio, the window count and the machine (CPU flags,
threads) go to JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from qrag.eval.ordinary_text_data import load_squad
from qrag.training.model.precision import speed_flags
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher, load_model

MODES = ("cut", "windows")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--squad", required=True, help="a SQuAD-format file: its paragraphs are the passages")
    p.add_argument("--model", default="qrag/hotpotqa-minilm")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if args.repeats < 1 or args.queries < 1:
        p.error("--repeats and --queries must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args.model)
    pool = load_squad(args.squad, args.queries, 0)
    texts = list(pool.passages)
    index_s: dict[str, list[float]] = {m: [] for m in MODES}
    search_s: dict[str, list[float]] = {m: [] for m in MODES}
    indexes: dict[str, ChunkIndex] = {}
    with torch.no_grad():
        for _ in range(args.repeats):
            for mode in MODES:  # alternately, so drift in the machine's speed falls on both
                start = time.perf_counter()
                indexes[mode] = ChunkIndex.from_texts(model, texts, lexical=True, long_chunks=mode,  # type: ignore[arg-type]
                                                      show_progress=False)
                index_s[mode].append(time.perf_counter() - start)
                searcher = MultiHopSearcher(model, indexes[mode])
                start = time.perf_counter()
                searcher.search(list(pool.questions), k=5)
                search_s[mode].append(time.perf_counter() - start)
    windows = indexes["windows"].windows
    med = {m: {"index_s": statistics.median(index_s[m]), "search_s": statistics.median(search_s[m])} for m in MODES}
    result: dict[str, Any] = {
        "command": " ".join(["python", "scripts/bench_long_chunks.py", *sys.argv[1:]]),
        "machine": {"processor": platform.processor() or platform.machine(), "cpu_flags": speed_flags(),
                    "threads": torch.get_num_threads(), "python": platform.python_version(), "torch": torch.__version__},
        "passages": len(texts), "long_passages": len(set(windows.owner.tolist() if windows is not None else [])),
        "windows": len(windows) if windows is not None else 0, "queries": len(pool.questions),
        "runs": {"index_s": index_s, "search_s": search_s}, "medians": med,
        "ratios": {k: med["windows"][k] / med["cut"][k] for k in ("index_s", "search_s")},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("passages", "long_passages", "windows", "medians", "ratios")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
