"""Per-hop search throughput: a Chroma server over HTTP against qrag's in-process exact index.

    .venv/bin/python scripts/bench_vector_server.py --chunks 100000 --out results/vector_server_bench.json

Both sides answer the same `ChunkStore.search(queries, k, exclude)` call that `MultiHopSearcher` makes at
every hop (here with two chunks already taken per query, as at a third hop):
- `exact`: `ChunkIndex` (torch, exact inner products) in this process, B queries per call;
- `chroma-langchain`: `LangChainChunkStore` over `langchain_chroma.Chroma` on a `chroma run` server on
  127.0.0.1 (one HTTP request per query, as the adapter does);
- `chroma-batched`: the same collection queried with all B vectors in one request (what a batched client
  could do; not a qrag path).
Vectors (`--data`): `clustered` (default) mimics an embedding set: 1,000 random unit centres, each chunk
a centre plus Gaussian noise (cosine ≈ 0.9 to its centre), each query a chunk plus smaller noise (so every
query has a clear nearest neighbourhood); `random` is i.i.d. unit vectors, where every inner product is
near 0 and approximate search has nothing to go on (the worst case for HNSW). The same vectors serve
both sides. Recall@k of the server against the exact top-k is reported beside the speed. Prints a table
and writes JSON (setup, machine, per-path medians).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def start_server(folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    chroma = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    if chroma is None:
        raise SystemExit("the `chroma` command is missing: pip install 'qrag[chroma]'.")
    with (folder / "server.log").open("wb") as log:
        proc = subprocess.Popen([chroma, "run", "--path", str(folder / "db"), "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
    import chromadb

    deadline = time.monotonic() + 60
    while True:
        try:
            chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
            return proc, port
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the Chroma server did not start; see {folder / 'server.log'}") from None
            time.sleep(0.2)


def make_vectors(kind: str, n: int, d: int, q: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, D) unit chunk vectors and (Q, D) unit queries (see the module docstring)."""
    unit = torch.nn.functional.normalize
    if kind == "random":
        return unit(torch.randn(n, d, generator=gen), dim=1), unit(torch.randn(q, d, generator=gen), dim=1)
    centres = unit(torch.randn(1000, d, generator=gen), dim=1)  # (C, D)
    members = torch.randint(len(centres), (n,), generator=gen)  # (N,)
    vectors = unit(centres[members] + 0.5 * torch.randn(n, d, generator=gen) / d**0.5, dim=1)  # (N, D)
    sources = torch.randint(n, (q,), generator=gen)  # (Q,)
    return vectors, unit(vectors[sources] + 0.3 * torch.randn(q, d, generator=gen) / d**0.5, dim=1)


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    """Median seconds of `repeats` calls, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384, help="vector dim (384: all-MiniLM-L6-v2)")
    ap.add_argument("--queries", type=int, default=64, help="queries per timed pass")
    ap.add_argument("--k", type=int, default=4, help="results per query (a hop's beam width / k)")
    ap.add_argument("--batch", type=int, default=32, help="queries per exact-index call and per batched request")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ef-search", type=int, default=100, help="HNSW ef_search of the collection (Chroma's default 100)")
    ap.add_argument("--data", choices=["clustered", "random"], default="clustered")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the exact index")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if min(args.chunks, args.dim, args.queries, args.k, args.batch, args.repeats, args.threads, args.ef_search) < 1:
        raise SystemExit("every count must be at least 1.")

    import chromadb
    from langchain_chroma import Chroma

    from qrag.integrations import LangChainChunkStore
    from qrag.training.search.index import ChunkIndex

    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    vectors, queries = make_vectors(args.data, args.chunks, args.dim, args.queries, gen)  # (N, D), (Q, D)
    ids = [f"c{i}" for i in range(args.chunks)]
    texts = [f"chunk {i}" for i in range(args.chunks)]
    exclude = [{ids[2 * q], ids[2 * q + 1]} for q in range(args.queries)]  # two chunks taken per query

    exact = ChunkIndex(vectors, texts, ids)
    folder = Path(tempfile.mkdtemp(prefix="qrag-chroma-bench-"))
    proc, port = start_server(folder)
    try:
        client = chromadb.HttpClient(host="127.0.0.1", port=port)
        collection = client.create_collection("bench", configuration={"hnsw": {"space": "ip", "ef_search": args.ef_search}})
        t0 = time.perf_counter()
        step = 5000
        for start in range(0, args.chunks, step):
            collection.add(ids=ids[start:start + step], embeddings=vectors[start:start + step].numpy(),
                           documents=texts[start:start + step])
        ingest_s = time.perf_counter() - t0
        store = LangChainChunkStore(Chroma("bench", client=client))  # the metric is checked: 'ip'
        search_one = collection.query  # warm both paths once
        search_one(query_embeddings=queries[:1].numpy(), n_results=args.k)
        exact.search(queries[:1], args.k)

        def run_exact() -> list[Any]:
            out: list[Any] = []
            for s in range(0, args.queries, args.batch):
                out += exact.search(queries[s:s + args.batch], args.k, exclude[s:s + args.batch])
            return out

        def run_langchain() -> list[Any]:
            return store.search(queries, args.k, exclude)

        def run_batched() -> list[Any]:
            out: list[Any] = []
            for s in range(0, args.queries, args.batch):
                r = collection.query(query_embeddings=queries[s:s + args.batch].numpy(), n_results=args.k + 2)
                out += r["ids"]
            return out

        t_exact, res_exact = timed(run_exact, args.repeats)
        t_lc, res_lc = timed(run_langchain, args.repeats)
        t_batched, _ = timed(run_batched, args.repeats)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)

    recall = statistics.mean(
        len({c.id for c, _ in a} & {c.id for c, _ in b}) / max(1, len(a)) for a, b in zip(res_exact, res_lc, strict=True)
    )
    score_err = max((abs(sa - sb) for a, b in zip(res_exact, res_lc, strict=True)
                     for (ca, sa), (cb, sb) in zip(a, b, strict=False) if ca.id == cb.id), default=0.0)
    rows = [
        {"path": "exact (in-process ChunkIndex, torch)", "qps": args.queries / t_exact, "ms_per_query": 1000 * t_exact / args.queries},
        {"path": "chroma-langchain (server, 1 request/query)", "qps": args.queries / t_lc, "ms_per_query": 1000 * t_lc / args.queries},
        {"path": f"chroma-batched (server, {args.batch} queries/request)", "qps": args.queries / t_batched,
         "ms_per_query": 1000 * t_batched / args.queries},
    ]
    for r in rows:
        r["vs_exact"] = r["qps"] / rows[0]["qps"]
    result = {
        "command": " ".join(["scripts/bench_vector_server.py", *sys.argv[1:]]),
        "setup": {"chunks": args.chunks, "dim": args.dim, "queries": args.queries, "k": args.k, "batch": args.batch,
                  "excluded_per_query": 2, "repeats": args.repeats, "torch_threads": args.threads,
                  "data": args.data, "seed": 0, "chroma_space": "ip", "ef_search": args.ef_search},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__, "chromadb": chromadb.__version__},
        "ingest_s": ingest_s, "ingest_vectors_per_s": args.chunks / ingest_s,
        "recall_at_k_server_vs_exact": recall, "max_abs_q_difference_on_shared_hits": score_err,
        "paths": rows,
    }
    print(f"{args.data} {args.chunks} chunks × {args.dim} dims, {args.queries} queries, k={args.k}, 2 taken per query, "
          f"ef_search {args.ef_search}; "
          f"ingest {ingest_s:.1f} s ({args.chunks / ingest_s:.0f} vectors/s); server recall@{args.k} {recall:.3f}; "
          f"max |ΔQ| on shared hits {score_err:.2e}")
    print(f"{'path':52} {'queries/s':>10} {'ms/query':>9} {'vs exact':>9}")
    for r in rows:
        print(f"{r['path']:52} {r['qps']:10.1f} {r['ms_per_query']:9.2f} {r['vs_exact']:9.3f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
