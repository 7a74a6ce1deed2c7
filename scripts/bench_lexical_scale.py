"""What the lexical part of a hop costs as the corpus grows: BM25 of a second-hop state (the question and the passage
taken, some 100 words) and the question's word pairs, over every chunk, at 2 000 / 20 000 / 100 000 passages, beside
one encoder pass of that state (`qrag.training.search.lexical`, METHOD.md §4.5).

    python scripts/bench_lexical_scale.py --out results/lexical_scale/lexical_scale.json
    python scripts/bench_lexical_scale.py --sizes 2000,20000 --states 10   # a quick look

Text: HotpotQA's training pool (rows 0-8 499 of `hotpotqa_pool`: their distinct gold passages, some 12 000), cycled to
N passages; each repeat past the first has its copy number appended ("... 3") so that the passages stay distinct
(100 000 passages repeat each Wikipedia paragraph about eight times: real words, a repeated distribution). The states:
the training rows' questions followed by their gold passages (and the next rows', a passage being a sentence or two)
up to 100 words. For each N, one thread: the median of `scores` of
one state (words), of `pair_scores` of its question (the pairs a hop weighs) and of the whole state (the worst case),
their sum as the lexical part of a hop, and the peak bytes NumPy allocated while scoring (tracemalloc); then the same
for 16 states at once. The encoder pass: `embed_states` of one state with the bundled MiniLM (fp32), median.
Prints a Markdown table and writes JSON with the machine (CPU flags, threads).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qrag.training.data import hotpot_pool
from qrag.training.model.precision import speed_flags
from qrag.training.search.lexical import LexicalIndex


def corpus(pool: tuple[str, ...], n: int) -> list[str]:
    """The first n passages of the pool repeated, each copy past the first ending with its copy number."""
    return [pool[i % len(pool)] + ("" if i < len(pool) else f" {i // len(pool)}") for i in range(n)]


def measured(fn: Callable[[], Any], repeats: int) -> tuple[float, int]:
    """Median seconds of `repeats` calls, and the peak bytes allocated during one more (tracemalloc)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), peak


def encoder_pass(states: list[tuple[str, str]], repeats: int) -> dict[str, float]:
    from qrag.training.model.encoders import BUNDLED_MINILM
    from qrag.training.model.qnet import QNetwork

    qnet = QNetwork.from_encoder(BUNDLED_MINILM)
    qnet.eval()
    tokens = [len(qnet.tokenizer(q + " " + p)["input_ids"]) for q, p in states[:repeats]]
    times = []
    with torch.inference_mode():
        for q, p in states[:repeats]:
            t0 = time.perf_counter()
            qnet.embed_states([q], [[p]])
            times.append(time.perf_counter() - t0)
    return {"p50_s": statistics.median(times), "tokens_p50": statistics.median(tokens)}


def bench_size(pool: tuple[str, ...], n: int, states: list[tuple[str, str]], repeats: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    index = LexicalIndex.from_texts(corpus(pool, n), pairs=True)
    row: dict[str, Any] = {"n": n, "from_texts_s": time.perf_counter() - t0, "memory": index.memory()}
    texts = [f"{q} {p}" for q, p in states]
    questions = [q for q, _ in states]
    row["state_words_p50"] = statistics.median(len(t.split()) for t in texts)
    parts: dict[str, list[tuple[float, int]]] = {"words": [], "pairs_question": [], "pairs_state": []}
    for text, question in zip(texts, questions, strict=True):
        parts["words"].append(measured(lambda t=text: index.scores([t]), repeats))
        parts["pairs_question"].append(measured(lambda q=question: index.pair_scores([q]), repeats))
        parts["pairs_state"].append(measured(lambda t=text: index.pair_scores([t]), repeats))
    for name, got in parts.items():
        row[name] = {"p50_s": statistics.median(s for s, _ in got), "peak_bytes_max": max(b for _, b in got)}
    row["hop_lexical_p50_s"] = row["words"]["p50_s"] + row["pairs_question"]["p50_s"]
    batch = texts[:16]
    s16, b16 = measured(lambda: index.scores(batch), max(1, repeats // 2))
    p16, pb16 = measured(lambda: index.pair_scores(batch), max(1, repeats // 2))
    row["sixteen_states"] = {"words_s": s16, "words_peak_bytes": b16, "pairs_state_s": p16, "pairs_peak_bytes": pb16}
    print(f"  N={n:,}: words {row['words']['p50_s'] * 1e3:.1f} ms, question pairs "
          f"{row['pairs_question']['p50_s'] * 1e3:.1f} ms, state pairs {row['pairs_state']['p50_s'] * 1e3:.1f} ms; "
          f"peak {max(row[k]['peak_bytes_max'] for k in parts) / 2**20:.1f} MiB; 16 states: words {s16 * 1e3:.0f} ms "
          f"({b16 / 2**20:.0f} MiB), pairs {p16 * 1e3:.0f} ms ({pb16 / 2**20:.0f} MiB)", flush=True)
    return row


def table(rows: list[dict[str, Any]], encoder: dict[str, float]) -> str:
    lines = ["| N | words of the state (ms) | pairs of the question (ms) | lexical part of a hop (ms) | "
             "pairs of the state (ms) | peak scratch, 1 state (MiB) | 16 states: words + pairs (ms, peak MiB) | "
             "vocabulary (MiB) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        peak = max(r[k]["peak_bytes_max"] for k in ("words", "pairs_question", "pairs_state")) / 2**20
        six = r["sixteen_states"]
        lines.append(f"| {r['n']:,} | {r['words']['p50_s'] * 1e3:.1f} | {r['pairs_question']['p50_s'] * 1e3:.1f} | "
                     f"{r['hop_lexical_p50_s'] * 1e3:.1f} | {r['pairs_state']['p50_s'] * 1e3:.1f} | {peak:.1f} | "
                     f"{(six['words_s'] + six['pairs_state_s']) * 1e3:.0f}, "
                     f"{max(six['words_peak_bytes'], six['pairs_peak_bytes']) / 2**20:.0f} | "
                     f"{r['memory']['vocabulary'] / 2**20:.0f} |")
    lines.append(f"\nOne encoder pass of a state ({encoder['tokens_p50']:.0f} tokens, p50): "
                 f"{encoder['p50_s'] * 1e3:.1f} ms.")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2000,20000,100000", help="corpus sizes N, comma-separated")
    ap.add_argument("--states", type=int, default=30, help="second-hop states scored at each size")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per state (the median is kept)")
    ap.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pool = hotpot_pool.load_pool()
    rows = pool.split_rows("train")
    states = []
    for i, r in enumerate(rows[: args.states]):  # a second hop's state: the question and some 100 words taken
        taken = [*r.passages, *rows[i + 1].passages, *rows[i + 2].passages]
        states.append((r.question, " ".join(" ".join(taken).split()[:100 - len(r.question.split())])))
    encoder = encoder_pass(states, args.states)
    print(f"encoder pass of a state: {encoder['p50_s'] * 1e3:.1f} ms", flush=True)
    sizes = [bench_size(pool.pools["train"], int(s), states, args.repeats) for s in args.sizes.split(",")]
    print(table(sizes, encoder))
    result = {"machine": {"processor": platform.processor() or platform.machine(), "cpu_flags": speed_flags(),
                          "threads": torch.get_num_threads(), "python": platform.python_version(),
                          "numpy": np.__version__},
              "text": f"hotpotqa_pool train pool, {len(pool.pools['train'])} passages, cycled with a copy number",
              "encoder_pass": encoder, "sizes": sizes}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
