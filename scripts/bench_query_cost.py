"""What a qrag query costs against the retrievers a user runs today over the same MiniLM, in one run.

    python scripts/bench_query_cost.py --passages 2000 --queries 40 --threads 1 --callers 8 --rounds 2

    python scripts/bench_query_cost.py --sizes 2000,10033,20000,100000 --queries 30 --threads 1 \
        --saved <folder> --out results/query_cost/sizes.json

The default run is `qrag.eval.price_probe`'s: `QRAGRetriever.from_texts(summaries, model=..., k=5)` with the model's
own search settings and precision, beside LangChain's `InMemoryVectorStore` and a Chroma collection's own retriever
filled with the same vectors, over the first `--passages` Wikipedia summaries (the pages of the questions first),
each question asked once by each retriever: one at a time (taking turns question by question) and `--callers`
threads at once for `--rounds` rounds of new questions. Torch runs `--threads` intra-op threads.

`--sizes`: qrag (with the model's words and pairs BM25; as shipped, and with every hop of its horizon:
`fill='question_unguarded'`, no stop rule) and the plain retriever one query at a time at each size, over one index
grown in place (`ChunkIndex.add_vectors`: nothing is embedded twice). The 10 033 summaries are
embedded once (`--saved` keeps their index for the next run); a size up to 10 033 is the first summaries, a larger
one is built by repetition: copy c of each summary (c = 1, 2, ...) with " (copy c)" appended to its text, so BM25
counts it as a document of its own, and its vector perturbed by Gaussian noise of norm `PERTURB` × its own and
renormalised (near-duplicates, no ties). The plain store holds the same vectors (qrag's chunk tower is the
normalised base MiniLM; the JSON records the largest difference from the store's own embedder). Per size: p50 /
p90, encoder passes and hops per query, and the resident memory of `--memory-queries` searches of each retriever
(the peak, VmHWM after a reset, and its rise over the start; tracemalloc's peak of their Python and NumPy
allocations).

Writes JSON (`--out`, default results/query_cost/query_cost.json) with the machine (CPU flags, cores, load average,
torch).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from qrag.eval.price_probe import KnownVectors, run_price, summaries_and_questions
from qrag.eval.query_cost import alone, counted, pass_counter, search_memory, summary
from qrag.integrations import QRAGEmbeddings, QRAGRetriever
from qrag.training.model import precision
from qrag.training.search import ChunkIndex, MultiHopSearcher
from qrag.training.search.index import weighs_pairs
from qrag.training.search.lexical import LexicalIndex
from qrag.training.search.windows import Windows

PERTURB = 0.05
"""The norm of the noise on a repeated passage's vector, as a share of the vector's own."""


def saved_or_built(texts: list[str], args: argparse.Namespace, *, show_progress: bool) -> QRAGRetriever:
    """The retriever over `texts`: loaded from `--saved` where that folder exists, else built (and saved there)."""
    if args.saved is not None and args.saved.exists():
        return QRAGRetriever.load_local(args.saved)
    retriever = QRAGRetriever.from_texts(texts, model=args.model, k=args.k, show_progress=show_progress)
    if args.saved is not None:
        retriever.save_local(args.saved)
    return retriever


def copy_text(text: str, copy: int) -> str:
    """A repeated passage's text: the original with a copy marker, so BM25 counts it as a document of its own."""
    return f"{text} (copy {copy})"


def perturbed(vectors: torch.Tensor, seed: int, scale: float = PERTURB) -> torch.Tensor:
    """`vectors` plus Gaussian noise of norm about `scale` times theirs, each row renormalised to its own norm."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(vectors.shape, generator=g) / vectors.shape[1] ** 0.5
    norms = vectors.norm(dim=1, keepdim=True)
    moved = vectors + scale * norms * noise
    return moved * norms / moved.norm(dim=1, keepdim=True)


def reordered(full: ChunkIndex, texts: list[str]) -> tuple[torch.Tensor, Windows | None]:
    """The chunk vectors and later windows of `full` in the order of `texts` (the same texts, in any order)."""
    row = {t: i for i, t in enumerate(full.texts)}
    if len(row) != len(texts) or any(t not in row for t in texts):
        raise SystemExit(f"the saved index holds other texts than these {len(texts)} summaries; pass another --saved.")
    perm = torch.tensor([row[t] for t in texts])
    windows = full.windows
    if windows is not None and len(windows):
        new = torch.empty_like(perm)
        new[perm] = torch.arange(len(perm))
        owner = new[windows.owner.cpu()]
        order = torch.argsort(owner, stable=True)
        windows = Windows(windows.vectors.cpu()[order].float(), owner[order])
    return full.vectors.cpu()[perm].float(), windows


def rows_of(vectors: torch.Tensor, windows: Windows | None, texts: list[str], start: int,
            stop: int) -> tuple[torch.Tensor, list[str], Windows | None]:
    """Rows start..stop of the index built by repetition of the N `texts` (they, then copy 1 of each, copy 2, ...):
    their vectors (copies' perturbed), texts (copies' marked) and later windows (owners from 0 over these rows)."""
    n = len(texts)
    vecs, out, win_v, win_o = [], [], [], []
    at = start
    while at < stop:
        copy, first = divmod(at, n)
        last = min(n, first + stop - at)
        v = vectors[first:last]
        vecs.append(v if copy == 0 else perturbed(v, seed=at))
        out += [texts[r] if copy == 0 else copy_text(texts[r], copy) for r in range(first, last)]
        if windows is not None and len(windows):
            keep = (windows.owner >= first) & (windows.owner < last)
            wv = windows.vectors[keep]
            win_v.append(wv if copy == 0 else perturbed(wv, seed=-at - 1))
            win_o.append(windows.owner[keep] - first + (at - start))
        at += last - first
    joined = (Windows(torch.cat(win_v), torch.cat(win_o)) if windows is not None and win_v
              else (Windows.empty(vectors.shape[1]) if windows is not None else None))
    return torch.cat(vecs), out, joined


def sizes_run(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    """qrag (and the plain retriever, up to `--plain-up-to`) one query at a time at each size, the index grown in
    place: the summaries first (size <= 10 033: the first `size`), then copies of them (module docstring)."""
    from langchain_core.vectorstores import InMemoryVectorStore

    texts, asked = summaries_and_questions(10**9, args.queries)
    questions = [q["question"] for q in asked]
    n = len(texts)
    if sizes != sorted(sizes) or sizes[0] > n or sizes[0] < 1:
        raise SystemExit(f"--sizes must ascend from at most the {n} summaries, got {sizes}.")
    t0 = time.perf_counter()
    full_retriever = saved_or_built(texts, args, show_progress=True)
    embed_s = time.perf_counter() - t0
    full = full_retriever.searcher.store
    if not isinstance(full, ChunkIndex):
        raise SystemExit(f"the retriever in {args.saved} is not over an in-process index; pass another --saved.")
    qnet = full_retriever.searcher.model
    vectors, windows = reordered(full, texts)
    first_v, first_t, first_w = rows_of(vectors, windows, texts, 0, sizes[0])
    index = ChunkIndex(first_v, first_t, [str(r) for r in range(sizes[0])], encoder=full.encoder,
                       chunk_tower=full.chunk_tower, precision=full.precision, long_chunks=full.long_chunks,
                       windows=first_w, lexical=LexicalIndex.from_texts(first_t, pairs=weighs_pairs(qnet)))
    qrag = QRAGRetriever(searcher=MultiHopSearcher(qnet, index), k=args.k)
    known = KnownVectors(QRAGEmbeddings("sentence-transformers/all-MiniLM-L6-v2"))
    check = known.base.embed_documents(texts[:8])  # the plain store's own vectors of a few summaries
    same_vectors = float((torch.tensor(check) - vectors[:8]).abs().max())
    known.known.update(zip(first_t, first_v.tolist(), strict=True))
    plain: Any = InMemoryVectorStore(known)
    plain.add_texts(first_t, ids=[str(r) for r in range(sizes[0])])
    torch.set_num_threads(args.threads)
    counter = pass_counter(qrag)
    rows: list[dict[str, Any]] = []
    for size in sizes:
        if len(index) < size:
            v, t, w = rows_of(vectors, windows, texts, len(index), size)
            ids = [str(r) for r in range(len(index), size)]
            t1 = time.perf_counter()
            index.add_vectors(v, t, ids, windows=w)
            add_s = time.perf_counter() - t1
            if plain is not None:
                known.known.update(zip(t, v.tolist(), strict=True))
                plain.add_texts(t, ids=ids)
        else:
            add_s = 0.0
        with_plain = plain is not None and size <= args.plain_up_to
        hops: list[int] = []
        passes: list[int] = []
        hops_u: list[int] = []
        passes_u: list[int] = []
        ask: dict[str, Callable[[str], Any]] = {
            "qrag": counted(qrag, hops, counter, passes),
            "qrag_unguarded": counted(qrag, hops_u, counter, passes_u, fill="question_unguarded", stop_threshold=None)}
        if with_plain:
            ask["plain"] = plain.as_retriever(search_kwargs={"k": args.k}).invoke
        for fn in ask.values():
            for q in questions[:3]:  # warm-up, outside the timing
                fn(q)
        for xs in (hops, passes, hops_u, passes_u):
            xs.clear()
        lat = alone(ask, questions)
        row: dict[str, Any] = {
            "passages": size, "by_repetition": size > n, "add_s": add_s,
            "one_at_a_time": {name: summary(xs) for name, xs in lat.items()},
            "qrag_encoder_passes_per_query": statistics.mean(passes),
            "qrag_hops_per_query": statistics.mean(hops), "qrag_hops_histogram": dict(sorted(Counter(hops).items())),
            "qrag_unguarded_encoder_passes_per_query": statistics.mean(passes_u),
            "qrag_unguarded_hops_per_query": statistics.mean(hops_u),
            "memory": {name: search_memory(fn, questions[: args.memory_queries]) for name, fn in ask.items()},
            "process_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
        if with_plain:
            row["p50_ratio"] = row["one_at_a_time"]["qrag"]["p50_ms"] / row["one_at_a_time"]["plain"]["p50_ms"]
        rows.append(row)
        plain_p50 = row["one_at_a_time"]["plain"]["p50_ms"] if with_plain else float("nan")
        print(f"| {size} | qrag p50 {row['one_at_a_time']['qrag']['p50_ms']:.1f} ms | plain p50 {plain_p50:.1f} ms | "
              f"qrag peak {row['memory']['qrag']['rss_peak_mb']} MB (+{row['memory']['qrag']['peak_above_start_mb']}) "
              f"| hops {row['qrag_hops_per_query']:.2f} | passes {row['qrag_encoder_passes_per_query']:.2f} | "
              f"unguarded: p50 {row['one_at_a_time']['qrag_unguarded']['p50_ms']:.1f} ms, "
              f"hops {row['qrag_unguarded_hops_per_query']:.2f}, passes {row['qrag_unguarded_encoder_passes_per_query']:.2f} |",
              flush=True)
        if plain is not None and size >= args.plain_up_to:
            plain = None  # free its vectors before the larger sizes
            known.known.clear()
            gc.collect()
    for name in ("qrag", "qrag_unguarded"):
        base = rows[0]["one_at_a_time"][name]["p50_ms"]
        for row in rows:
            row[f"{name}_p50_over_first_size"] = row["one_at_a_time"][name]["p50_ms"] / base
    return {
        "mode": "sizes", "summaries": n, "embed_or_load_s": embed_s,
        "plain_store": ("InMemoryVectorStore filled with qrag's chunk vectors (its chunk tower is the normalised base "
                        "MiniLM); the largest |difference| from the store's own embedder on the first 8 summaries: "
                        f"{same_vectors:.2e}"),
        "plain_up_to": args.plain_up_to,
        "built_by_repetition": (
            f"sizes above {n} are built by repetition: the {n} summaries, then copy c of each (c = 1, 2, ...) with "
            f"' (copy c)' appended to its text (BM25 counts each copy as a document of its own) and its chunk vector "
            f"(and later windows) perturbed by Gaussian noise of norm {PERTURB} x its own and renormalised "
            "(near-duplicates, not identical, so no ties)"),
        "qrag_unguarded": ("qrag with fill='question_unguarded' and no stop rule, timed beside it: every hop of the "
                           "model's horizon at every size (the off-domain guard ends more searches after one hop as "
                           "the corpus grows, and the copies' near-duplicates add to that), the same work per query"),
        "questions_asked": asked, "sizes": rows,
    }


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
    ap.add_argument("--sizes", default=None,
                    help="comma-separated passage counts (e.g. 2000,10033,20000,100000): qrag one query at a time at "
                         "each, the counts past the 10 033 summaries built by repetition; --saved then keeps the "
                         "index of all the summaries")
    ap.add_argument("--plain-up-to", type=int, default=100_000, help="--sizes: time the plain retriever up to here")
    ap.add_argument("--memory-queries", type=int, default=10, help="--sizes: questions the memory pass asks")
    args = ap.parse_args()
    machine = {"cpu": platform.processor() or platform.machine(), "cpu_flags": precision.vector_flags(),
               "cores": os.cpu_count(), "torch": torch.__version__}
    command = "python scripts/bench_query_cost.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)
    if args.sizes is not None:
        sizes = [int(x) for x in args.sizes.split(",")]
        result = {"command": command, "model": args.model, "k": args.k, "queries": args.queries,
                  "threads": args.threads, **sizes_run(args, sizes),
                  "machine": {**machine, "load_average": os.getloadavg()}}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
        return

    texts, asked = summaries_and_questions(args.passages, 3 + args.queries + args.rounds * 4 * args.callers)
    t0 = time.perf_counter()
    qrag = saved_or_built(texts, args, show_progress=False)
    index_s = time.perf_counter() - t0
    got = run_price(qrag, texts, asked, k=args.k, threads=args.threads, callers=args.callers, rounds=args.rounds,
                    alone=args.queries)
    result = {"command": command, "model": args.model, "k": args.k, "passages": len(texts), "threads": args.threads,
              "callers": args.callers, "index_s": index_s, "precision": qrag.searcher.model.serving_precision,
              "precision_why": qrag.searcher.model.serving_why,
              **got, "machine": {**machine, "load_average": os.getloadavg()}}
    one, many = got["one_at_a_time"], got["callers_at_once"]
    print(f"| one at a time ({args.threads} thread) | p50 ms | p90 ms | {args.callers} callers: queries/s |")
    print("|---|---|---|---|")
    for name, s in one.items():
        print(f"| {name} | {s['p50_ms']:.1f} | {s['p90_ms']:.1f} | {many[name]['queries_per_s']:.2f} |")
    for name in got["p50_ratio"]:
        print(f"qrag / {name}: p50 {got['p50_ratio'][name]:.2f}x, throughput {got['throughput_ratio'][name]:.2f}")
    print(f"{got['qrag_encoder_passes_per_query']:.1f} encoder passes, {got['qrag_token_layers_per_query']:.0f} "
          f"token-layers, {got['qrag_hops_per_query']:.2f} hops per qrag query")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
