"""Latency of concurrent `QRAGRetriever.invoke` calls with one intra-op torch thread against torch's default.

    python scripts/bench_serving_threads.py --mode processes --out results/serving_threads/processes.json
    python scripts/bench_serving_threads.py --mode threads --passages 300 --workers 4 --queries 8 --rounds 2

N workers each call `invoke` on HotpotQA validation questions over real passages of the pool
(`qrag/hotpotqa-minilm`, k=4): `processes`, N worker processes each with its own copy of the retriever (a
gunicorn-style server; `load_local` of one save), or `threads`, N threads sharing one retriever (whose encoder
calls a lock serialises). The settings alternate round by round so that a drift of the machine's load falls on
both. Prints p50 / p90 latency and throughput per setting; writes JSON with the machine (CPU flags, cores, load
average, torch).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from qrag.integrations import QRAGRetriever
from qrag.training.data import hotpot_pool
from qrag.training.model import precision


def run(retriever: QRAGRetriever, questions: list[str], workers: int, queries: int) -> tuple[list[float], float]:
    """Per-call latencies (seconds) of `workers` threads calling `invoke` `queries` times each, and the wall time."""
    latencies: list[float] = []
    lock = threading.Lock()

    def work(w: int) -> None:
        for i in range(queries):
            q = questions[(w * queries + i) % len(questions)]
            t0 = time.perf_counter()
            retriever.invoke(q)
            with lock:
                latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - t0


def _process_worker(folder: str, questions: list[str], threads: int, queries: int, start: Any, out: Any) -> None:
    torch.set_num_threads(threads)
    retriever = QRAGRetriever.load_local(folder)
    retriever.invoke(questions[0])  # warm-up, outside the timing
    start.wait()
    t_first, latencies = time.perf_counter(), []
    for q in questions[:queries]:
        t0 = time.perf_counter()
        retriever.invoke(q)
        latencies.append(time.perf_counter() - t0)
    out.put((latencies, t_first, time.perf_counter()))


def run_processes(folder: str, questions: list[str], workers: int, queries: int, threads: int) -> tuple[list[float], float]:
    """Per-call latencies of `workers` processes (each `threads` intra-op threads) and the wall time of them all."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(folder, questions[w * queries:] + questions, threads, queries,
                                                      start, out)) for w in range(workers)]
    for p in procs:
        p.start()
    got = [out.get() for _ in procs]
    for p in procs:
        p.join()
    latencies = [x for lat, _, _ in got for x in lat]
    return latencies, max(end for _, _, end in got) - min(first for _, first, _ in got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("processes", "threads"), default="processes")
    ap.add_argument("--passages", type=int, default=300)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--queries", type=int, default=6, help="invokes per worker per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    default_threads = torch.get_num_threads()
    pool = hotpot_pool.load_pool()
    rows = pool.split_rows("val")
    gold = list(dict.fromkeys(p for r in rows[:60] for p in r.passages))
    texts = (gold + [p for p in pool.pools["val"] if p not in gold])[: args.passages]
    questions = [r.question for r in rows[:60]]
    retriever = QRAGRetriever.from_texts(texts, "qrag/hotpotqa-minilm", k=4, show_progress=False)
    retriever.invoke(questions[0])  # warm-up: first-call allocations
    folder = retriever.save_local(Path(tempfile.mkdtemp()) / "retriever")

    settings = {"1 thread": 1, f"default ({default_threads} threads)": default_threads}
    lat: dict[str, list[float]] = {name: [] for name in settings}
    wall: dict[str, float] = dict.fromkeys(settings, 0.0)
    for _ in range(args.rounds):
        for name, n in settings.items():
            if args.mode == "processes":
                got, seconds = run_processes(str(folder), questions, args.workers, args.queries, n)
            else:
                torch.set_num_threads(n)
                got, seconds = run(retriever, questions, args.workers, args.queries)
            lat[name] += got
            wall[name] += seconds
    torch.set_num_threads(default_threads)

    rows_out = []
    print(f"| intra-op threads | p50 s | p90 s | queries/s | ({args.workers} {args.mode}, {len(texts)} passages)")
    print("|---|---|---|---|")
    for name in settings:
        xs = sorted(lat[name])
        p50, p90 = statistics.median(xs), xs[int(0.9 * (len(xs) - 1))]
        qps = len(xs) / wall[name]
        rows_out.append({"setting": name, "p50_s": p50, "p90_s": p90, "queries_per_s": qps, "calls": len(xs)})
        print(f"| {name} | {p50:.2f} | {p90:.2f} | {qps:.2f} |")
    machine = {"cpu": platform.processor() or platform.machine(), "cpu_flags": precision.vector_flags(), "cores": os.cpu_count(),
               "load_average": os.getloadavg(), "torch": torch.__version__, "default_threads": default_threads}
    print(json.dumps(machine))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "machine": machine,
                                        "results": rows_out}, indent=2))


if __name__ == "__main__":
    main()
