"""How a query is served fastest on this CPU: `from_texts` in torch fp32 and bf16, ONNX Runtime fp32 and int8, 'auto'.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_serving_precision.py --passages 2000 \\
        --queries 120 --threads 1 --out results/query_cost/serving_engine.json

Builds `QRAGRetriever.from_texts(summaries, model=..., k=5, precision=P)` over the first `--passages` Wikipedia
summaries (the price probe's, `qrag.eval.price_probe`) for each serving path of `PATHS`: 'torch fp32' and 'torch
bf16' with the towers' CPU engines dropped (`QNetwork.drop_engines`: every pass in eager torch), 'onnx fp32' (both
towers' gradient-free passes through ONNX Runtime, `qrag.training.model.onnx_engine`), 'onnx int8' (the state
passes through its int8 graphs, the index in fp32) and 'auto' (the shipped default: the engines, and bf16 or int8
only where a timed query's passes are clearly faster in it). Then asks each question once of each retriever, the
five taking turns question by question (machines are noisy), `--warmup` questions
untimed; prints and writes the p50 / p90 milliseconds of each, their ratios to torch fp32, what 'auto' chose here
and why (`qrag.training.model.serving_speed`), with the CPU's flags.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from qrag.eval.ordinary_text import machine
from qrag.eval.price_probe import summaries_and_questions
from qrag.eval.query_cost import alone, summary
from qrag.integrations import QRAGRetriever
from qrag.training.model import Precision

PATHS: dict[str, tuple[Precision, bool]] = {"torch fp32": ("fp32", False), "torch bf16": ("bf16", False),
                                            "onnx fp32": ("fp32", True), "onnx int8": ("int8", True),
                                            "auto": ("auto", True)}
"""Each serving path timed: (precision, whether the towers keep their CPU engines)."""


def retriever(texts: list[str], model: str, k: int, precision: Precision, engines: bool) -> QRAGRetriever:
    built = QRAGRetriever.from_texts(texts, model=model, k=k, precision=precision)
    if not engines:
        built.searcher.model.drop_engines()
    return built


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=120, help="questions timed (each asked once of each retriever)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads, building and timing")
    ap.add_argument("--model", default="qrag/hotpotqa-minilm")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("results/query_cost/serving_engine.json"))
    args = ap.parse_args()
    if args.queries < 1 or args.passages < 1:
        ap.error(f"--queries {args.queries} and --passages {args.passages} must be at least 1")
    torch.set_num_threads(args.threads)
    texts, asked = summaries_and_questions(args.passages, args.warmup + args.queries)
    questions = [q["question"] for q in asked]
    if len(questions) < args.warmup + args.queries:
        ap.error(f"only {len(questions)} questions can be built: lower --queries {args.queries}")
    retrievers = {name: retriever(texts, args.model, args.k, *path) for name, path in PATHS.items()}
    ask = {p: retriever.invoke for p, retriever in retrievers.items()}
    alone(ask, questions[:args.warmup])  # untimed
    timed = {p: summary(s) for p, s in alone(ask, questions[args.warmup:]).items()}
    p50 = {p: t["p50_ms"] for p, t in timed.items()}
    auto = retrievers["auto"].searcher.model
    result = {"command": "python scripts/bench_serving_precision.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
              "p50_ms": p50, "p90_ms": {p: t["p90_ms"] for p, t in timed.items()},
              "over_torch_fp32": {p: p50[p] / p50["torch fp32"] for p in PATHS},
              "auto_serves": auto.serving_precision, "auto_why": auto.serving_why, "auto_engine": auto.engine_why,
              "machine": machine()}
    for p, t in timed.items():
        print(f"{p}: p50 {t['p50_ms']:.1f} ms, p90 {t['p90_ms']:.1f} ms ({t['p50_ms'] / p50['torch fp32']:.2f}x torch fp32)")
    print(f"auto serves {auto.serving_precision}: {auto.serving_why}; {auto.engine_why}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
