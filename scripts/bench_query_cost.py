"""What a qrag query costs against a plain retriever over the same MiniLM, in one run (issue 77's probe).

    python scripts/bench_query_cost.py --passages 2000 --queries 30 --threads 1 --callers 8

`QRAGRetriever.from_texts(summaries, model="qrag/hotpotqa-minilm", k=5)` with the model's own search settings, and
LangChain's `InMemoryVectorStore` over the bundled all-MiniLM-L6-v2 (`QRAGEmbeddings`, cosine) as the plain
retriever, k=5, over the first `--passages` Wikipedia summaries (FanOutQA's test questions' evidence pages first;
the summaries FanOutQA's questions are asked over), asked FanOutQA's test questions (never its dev set, which is
evaluation only). Torch runs `--threads` intra-op threads.

- one query at a time: qrag and the plain retriever take turns question by question, so a change of the machine's
  load falls on both; p50 / p90 latency and their ratio;
- `--callers` threads at once, each asking its own questions, qrag and plain alternating round by round:
  throughput and p50 latency;
- per qrag query: encoder passes, and the token-layers they ran (rows × padded tokens × layers: the encoder's work).

Writes JSON (`--out`, default results/query_cost/query_cost.json) with the machine (CPU flags, cores, load average,
torch).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from qrag.integrations import QRAGEmbeddings, QRAGRetriever
from qrag.training.data import fanoutqa
from qrag.training.data.wiki import read_pages
from qrag.training.model.trunk import layers_of


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = set(next((line for line in text.splitlines() if line.startswith("flags")), "").split())
    return sorted(f for f in flags if f.startswith(("avx", "amx")))


def corpus(passages: int, queries: int) -> tuple[list[str], list[str]]:
    """The first `passages` summaries, the evidence pages of the first `queries` FanOutQA test questions first."""
    pages = read_pages()
    asked = fanoutqa.questions("test")[:queries]
    gold = list(dict.fromkeys(t for q in asked for t in q["supporting"]))
    titles = (gold + [t for t in pages if t not in set(gold)])[:passages]
    return [f"{t}. {pages[t].text}" for t in titles], [q["question"] for q in asked]


class PassCounter:
    """Counts a network's encoder passes and the token-layers they run (forward hooks on the embeddings and layers)."""

    def __init__(self, encoders: list[torch.nn.Module]) -> None:
        self.passes = 0
        self.token_layers = 0
        for encoder in encoders:
            found = layers_of(encoder)
            if found is None:
                continue
            embeddings, layers = found
            embeddings.register_forward_hook(self._pass)
            for layer in layers:
                layer.register_forward_hook(self._layer)

    def _pass(self, module: Any, args: Any, output: Any) -> None:
        self.passes += 1

    def _layer(self, module: Any, args: Any, output: Any) -> None:
        hidden = args[0] if args else output[0]
        self.token_layers += int(hidden.shape[0] * hidden.shape[1])


def alone(ask: dict[str, Callable[[str], Any]], questions: list[str]) -> dict[str, list[float]]:
    """Per retriever, the latency (s) of each question asked alone, the retrievers taking turns question by question."""
    out: dict[str, list[float]] = {name: [] for name in ask}
    for q in questions:
        for name, fn in ask.items():
            t0 = time.perf_counter()
            fn(q)
            out[name].append(time.perf_counter() - t0)
    return out


def together(fn: Callable[[str], Any], questions: list[str], callers: int) -> tuple[list[float], float]:
    """Latencies of `callers` threads each asking every `callers`-th question, and the wall time of them all."""
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(callers)

    def work(c: int) -> None:
        start.wait()
        for q in questions[c::callers]:
            t0 = time.perf_counter()
            fn(q)
            with lock:
                latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=work, args=(c,)) for c in range(callers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - t0


def summary(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"p50_ms": 1e3 * statistics.median(s), "p90_ms": 1e3 * s[int(0.9 * (len(s) - 1))], "calls": len(s)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=30, help="questions timed one at a time (and per round at once)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads while timing")
    ap.add_argument("--callers", type=int, default=8, help="threads asking at once")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the callers' run, qrag and plain alternating")
    ap.add_argument("--model", default="qrag/hotpotqa-minilm")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("results/query_cost/query_cost.json"))
    ap.add_argument("--saved", type=Path, default=None,
                    help="a folder to keep qrag's index in: loaded when it exists (of the same passages), else saved")
    args = ap.parse_args()

    from langchain_core.vectorstores import InMemoryVectorStore

    texts, questions = corpus(args.passages, max(args.queries, args.callers))
    t0 = time.perf_counter()
    if args.saved is not None and args.saved.exists():
        qrag = QRAGRetriever.load_local(args.saved)
    else:
        qrag = QRAGRetriever.from_texts(texts, model=args.model, k=args.k, show_progress=False)
        if args.saved is not None:
            qrag.save_local(args.saved)
    index_s = time.perf_counter() - t0
    plain = InMemoryVectorStore.from_texts(texts, QRAGEmbeddings("sentence-transformers/all-MiniLM-L6-v2"))
    plain_retriever = plain.as_retriever(search_kwargs={"k": args.k})
    torch.set_num_threads(args.threads)
    ask = {"qrag": qrag.invoke, "plain": plain_retriever.invoke}
    for fn in ask.values():
        for q in questions[:3]:  # warm-up: first-call allocations, outside the timing
            fn(q)

    qnet = qrag.searcher.model
    counter = PassCounter([m for m in (qnet.state_tower.encoder, qnet.chunk_tower.encoder) if m is not None]
                          + ([qnet._serving[1].encoder] if getattr(qnet, "_serving", None) else []))
    timed = questions[: args.queries]
    lat = alone(ask, timed)
    passes, token_layers = counter.passes / len(timed), counter.token_layers / len(timed)

    rounds: dict[str, tuple[list[float], float]] = {name: ([], 0.0) for name in ask}
    for _ in range(args.rounds):
        for name, fn in ask.items():
            got, wall = together(fn, timed, args.callers)
            rounds[name] = (rounds[name][0] + got, rounds[name][1] + wall)

    one = {name: summary(xs) for name, xs in lat.items()}
    many = {name: {**summary(xs), "queries_per_s": len(xs) / wall} for name, (xs, wall) in rounds.items()}
    result = {
        "command": "python scripts/bench_query_cost.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None),
        "model": args.model, "k": args.k, "passages": len(texts), "queries": len(timed), "threads": args.threads,
        "callers": args.callers, "rounds": args.rounds, "index_s": index_s,
        "one_at_a_time": one,
        "p50_ratio": one["qrag"]["p50_ms"] / one["plain"]["p50_ms"],
        "callers_at_once": many,
        "throughput_ratio": many["qrag"]["queries_per_s"] / many["plain"]["queries_per_s"],
        "qrag_encoder_passes_per_query": passes,
        "qrag_token_layers_per_query": token_layers,
        "machine": {"cpu": platform.processor() or platform.machine(), "cpu_flags": cpu_flags(),
                    "cores": os.cpu_count(), "load_average": os.getloadavg(), "torch": torch.__version__},
    }
    print(f"| one at a time ({args.threads} thread) | p50 ms | p90 ms |")
    print("|---|---|---|")
    for name, s in one.items():
        print(f"| {name} | {s['p50_ms']:.1f} | {s['p90_ms']:.1f} |")
    print(f"qrag / plain p50: {result['p50_ratio']:.2f}x; {passes:.1f} encoder passes, {token_layers:.0f} token-layers "
          "per qrag query")
    print(f"| {args.callers} callers at once | queries/s | p50 ms |")
    print("|---|---|---|")
    for name, s in many.items():
        print(f"| {name} | {s['queries_per_s']:.2f} | {s['p50_ms']:.0f} |")
    print(f"qrag / plain throughput: {result['throughput_ratio']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
