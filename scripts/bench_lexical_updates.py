"""What adding passages to the BM25 index costs by index size, against building it anew, and what a query costs
against bm25s's own index (`qrag.training.search.lexical`).

    python scripts/bench_lexical_updates.py --out results/lexical_updates/lexical_updates.json
    python scripts/bench_lexical_updates.py --sizes 5000,20000 --adds 1 --skip-bm25s   # the add cost only
    python scripts/bench_lexical_updates.py --pairs --sizes 10000,100000 --out results/lexical_updates/pairs.json

Corpora of N passages cycle HotpotQA's training pool (rows 0-8 499's gold passages), each with its row number
appended so that they stay distinct. For each N: `from_texts` over N (the base) and over N + m (a rebuild), `added` of m new passages to
the base (median of --repeats), a run of single adds one after the other (amortised merges: mean, median, max), a
one-row `deleted`, the time of `scores()` for one question against bm25s's `get_scores` over the same N, and the
bytes the index holds (`LexicalIndex.memory`: arrays and vocabulary) before and after deleting 90% of its chunks
(the vocabulary compacts once most of its terms are dead).
Prints a Markdown table and writes JSON with the machine (CPU flags, threads). With --pairs, only what the word-pair
index (METHOD.md §4.5) adds, side by side in one run: `from_texts` with and without pairs (median of --repeats), the
arrays' bytes per chunk and the terms of each part, and five questions' `scores` against their `pair_scores`.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qrag.training.data import hotpot_pool
from qrag.training.model.precision import speed_flags
from qrag.training.search.lexical import LexicalIndex

QUESTIONS = ["Which magazine was started first, Arthur's Magazine or First for Women?",
             "What government position was held by the woman who portrayed Corliss Archer in Kiss and Tell?",
             "Were Scott Derrickson and Ed Wood of the same nationality?",
             "The director of the romantic comedy Big Stone Gap is based in what New York city?",
             "Which airport is closer to the city centre, Gatwick or Stansted?"]


def corpus(pool: tuple[str, ...], start: int, n: int) -> list[str]:
    """Passages start … start + n − 1 of the cycled pool, each ending with its row number."""
    return [f"{pool[i % len(pool)]} {i}" for i in range(start, start + n)]


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds of `repeats` calls, and the last call's result."""
    times, out = [], None
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def index_bytes(index: LexicalIndex) -> int:
    return sum(a.nbytes for s in index._segments for a in (s.terms, s.starts, s.rows, s.tf, s.lengths))


def bench_size(pool: tuple[str, ...], n: int, adds: list[int], repeats: int, chain: int, bm25s_too: bool,
               rebuild_repeats: int) -> dict[str, Any]:
    texts = corpus(pool, 0, n)
    build_s, base = timed(lambda: LexicalIndex.from_texts(texts), 1)
    row: dict[str, Any] = {"n": n, "from_texts_s": build_s, "bytes_per_chunk": index_bytes(base) / n, "adds": [],
                           "memory": base.memory(),
                           "memory_after_deleting_90pc": base.deleted(range(n - n // 10)).memory()}
    for m in adds:
        new = corpus(pool, n, m)
        add_s, grown = timed(partial(base.added, new), repeats)
        rebuild_s, _ = timed(partial(LexicalIndex.from_texts, texts + new), rebuild_repeats)
        row["adds"].append({"m": m, "added_s": add_s, "from_texts_s": rebuild_s, "speedup": rebuild_s / add_s,
                            "segments": grown.segments})
        print(f"  N={n} m={m}: added {add_s * 1e3:.2f} ms, from_texts {rebuild_s:.2f} s", flush=True)
    one = corpus(pool, n, chain)
    times, index = [], base
    for t in one:  # single adds, each on the version before: the merges a living index pays for
        t0 = time.perf_counter()
        index = index.added([t])
        times.append(time.perf_counter() - t0)
    row["chain"] = {"adds": chain, "mean_s": statistics.fmean(times), "median_s": statistics.median(times),
                    "max_s": max(times), "segments": index.segments}
    row["deleted_one_s"], _ = timed(lambda: base.deleted([n // 2]), repeats)
    query_s, _ = timed(lambda: base.scores(QUESTIONS[:1]), repeats * 3)
    row["scores_one_query_s"] = query_s
    row["scores_one_query_segmented_s"], _ = timed(lambda: index.scores(QUESTIONS[:1]), repeats * 3)
    row["scores_five_queries_s"], _ = timed(lambda: base.scores(QUESTIONS), repeats)
    if bm25s_too:
        import bm25s

        t0 = time.perf_counter()
        ref = bm25s.BM25()
        ref.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
        row["bm25s_build_s"] = time.perf_counter() - t0
        words = [w for w in bm25s.tokenize(QUESTIONS[:1], stopwords="en", return_ids=False,
                                           show_progress=False)[0] if w in ref.vocab_dict]
        row["bm25s_get_scores_s"], want = timed(lambda: ref.get_scores(words), repeats * 3)
        row["max_abs_diff_vs_bm25s"] = float(np.abs(base.scores(QUESTIONS[:1])[0].numpy() - want).max())
        del ref
    return row


def bench_pairs(pool: tuple[str, ...], n: int, repeats: int) -> dict[str, Any]:
    texts = corpus(pool, 0, n)
    words_s, words = timed(lambda: LexicalIndex.from_texts(texts), repeats)
    both_s, both = timed(lambda: LexicalIndex.from_texts(texts, pairs=True), repeats)
    assert both.pairs is not None
    row = {"n": n, "words_from_texts_s": words_s, "words_and_pairs_from_texts_s": both_s, "build_ratio": both_s / words_s,
           "words_bytes_per_chunk": index_bytes(words) / n, "pairs_bytes_per_chunk": index_bytes(both.pairs) / n,
           "word_terms": len(words._vocabulary.words), "pair_terms": len(both.pairs._vocabulary.words),
           "memory": both.memory(), "memory_after_deleting_90pc": both.deleted(range(n - n // 10)).memory()}
    row["scores_five_queries_s"], _ = timed(lambda: both.scores(QUESTIONS), repeats * 3)
    row["pair_scores_five_queries_s"], _ = timed(lambda: both.pair_scores(QUESTIONS), repeats * 3)
    print(f"  N={n}: from_texts {words_s:.2f} s, with pairs {both_s:.2f} s ({both_s / words_s:.2f}x); bytes/chunk "
          f"{row['words_bytes_per_chunk']:.0f} + {row['pairs_bytes_per_chunk']:.0f}; 5 queries "
          f"{row['scores_five_queries_s'] * 1e3:.1f} ms, their pairs {row['pair_scores_five_queries_s'] * 1e3:.1f} ms",
          flush=True)
    return row


def mb(memory: dict[str, int]) -> str:
    return f"{memory['arrays'] / 1e6:.0f} + {memory['vocabulary'] / 1e6:.0f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| N | m | added (ms) | from_texts N+m (s) | speed-up | 200 single adds: mean / max (ms) | "
             "deleted 1 (ms) | scores 1 query (ms) | bm25s get_scores (ms) | arrays + vocabulary (MB) | "
             "after deleting 90% (MB) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for a in r["adds"]:
            bm = f"{r['bm25s_get_scores_s'] * 1e3:.2f}" if "bm25s_get_scores_s" in r else "-"
            lines.append(f"| {r['n']:,} | {a['m']:,} | {a['added_s'] * 1e3:.2f} | {a['from_texts_s']:.2f} | "
                         f"{a['speedup']:,.0f}x | {r['chain']['mean_s'] * 1e3:.2f} / {r['chain']['max_s'] * 1e3:.1f} | "
                         f"{r['deleted_one_s'] * 1e3:.1f} | {r['scores_one_query_s'] * 1e3:.2f} | {bm} | "
                         f"{mb(r['memory'])} | {mb(r['memory_after_deleting_90pc'])} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,400000", help="index sizes N, comma-separated")
    ap.add_argument("--adds", default="1,100,10000", help="passages m added at once, comma-separated")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each added() timing (the median is kept)")
    ap.add_argument("--rebuild-repeats", type=int, default=1, help="repeats of each from_texts rebuild")
    ap.add_argument("--chain", type=int, default=200, help="single adds one after the other")
    ap.add_argument("--skip-bm25s", action="store_true", help="no bm25s build to time queries against")
    ap.add_argument("--pairs", action="store_true", help="only the word-pair index's costs beside the words'")
    ap.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = ap.parse_args()
    pool = hotpot_pool.load_pool().pools["train"]
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        print(f"N = {n:,}", flush=True)
        if args.pairs:
            rows.append(bench_pairs(pool, n, args.repeats))
            continue
        rows.append(bench_size(pool, n, [int(m) for m in args.adds.split(",")], args.repeats, args.chain,
                               not args.skip_bm25s, args.rebuild_repeats))
    if not args.pairs:
        print(table(rows))
    result = {"machine": {"processor": platform.processor() or platform.machine(), "cpu_flags": speed_flags(),
                          "threads": torch.get_num_threads(), "python": platform.python_version(),
                          "numpy": np.__version__},
              "pool": f"hotpotqa_pool train, {len(pool)} passages cycled with their row number", "sizes": rows}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
