"""`qrag-eval`: run a benchmark against baselines (and a reader) and write results, summary, table, plot.

Examples:
    qrag-eval babilong --tasks qa1,qa2 --lengths 1k,4k --methods bm25,dense,multihop,oracle --out runs/bl
    qrag-eval babilong --model ckpt/ --methods qrag,qrag+stop,dense --reader smollm2 --num-samples 20 --out runs/q
    qrag-eval ruler --tasks niah_multivalue --lengths 4k,16k --out runs/niah
    qrag-eval hotpotqa --data hotpot_dev_distractor_v1.json --model ckpt/ --methods qrag,bm25 --out runs/hp
    qrag-eval wiki --tasks bridge,single --model runs/wiki-cpu/best --methods dense,bm25,multihop,qrag --budget 8 --out runs/w
    qrag-eval jsonl --data my_corpus.jsonl --model runs/wiki-cpu/best --methods dense,bm25,multihop,qrag --budget 8 --out runs/c
    qrag-eval corpus --data my_questions.jsonl --corpus my_passages.jsonl --model runs/ft/best \
        --methods cosine,bm25,hybrid,init,qrag --budget 8 --out runs/mine
    qrag-eval ordinary-text --squad new_wiki_v1.0.json --multirc task.json --half even --out runs/ordinary

With --budget 8 every method returns 8 passages per question and recall.md gives recall@2/4/8 (corpus: 2/4/5/8) of each
method with its paired 95% interval against the first single-shot floor the sweep runs (hybrid, cosine, dense;
recall_vs_NAME.md against the others and against 'init', the model a fine-tune started from). The first k of a
greedy ranking are its top k. `hybrid` fuses BM25 and cosine by reciprocal rank (c = 60), as LangChain's
EnsembleRetriever and LlamaIndex's QueryFusionRetriever do.
`dense` ranks by the inner product (qrag's untrained Q-value); `cosine` by the cosine of the same vectors,
what a vector store with a cosine metric does with the base encoder: the floor a general-text model must beat.
The table also gives latency per question, retrieval seconds per encoder call (one per hop) and the indexing
rate (chunks embedded per second); summary.json the peak memory (add --device cuda on a GPU box). With two or
more lengths, drift.md pairs each sample's fact EM at the longest length with the shortest.

At scale, on a GPU box (--speed-lengths adds indexing throughput and per-hop latency on one haystack per length):
    qrag-eval babilong --model ckpt/ --methods qrag,qrag+stop,dense,bm25 --lengths 32k,1m,10m --samples-at 10m=50 \
        --speed-lengths 1m,10m --device cuda --precision bf16 --out runs/scale
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from qrag.eval.methods import METHODS
from qrag.eval.report import DRIFT_FILE, PLOT_FILE, RECALL_FILE, SUMMARY_FILE, TABLE_FILE
from qrag.eval.sweep import BENCHMARKS, FILL_CHOICES, GENERATED, SPLITS, RunConfig
from qrag.training.input_checks import one_line
from qrag.training.model.config import ENCODER_PRECISIONS
from qrag.training.search.settings import FROM_MODEL

# The model libraries (torch, transformers) load after the arguments are parsed: --help and a bad flag answer at
# once (qrag.eval.runner, reader and speed import them).


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _samples_at(text: str) -> dict[str, int]:
    """'10m=50,1m=100' -> {'10m': 50, '1m': 100}."""
    out = {}
    for part in _csv(text):
        label, sep, n = part.partition("=")
        if not sep or not n.strip().isdigit():
            raise argparse.ArgumentTypeError(f"{part!r} is not LENGTH=SAMPLES (e.g. 10m=50)")
        out[label.strip()] = int(n)
    return out


def _weight(text: str) -> float | str:
    """'model' or a finite number >= 0."""
    if text == FROM_MODEL:
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a weight: pass a finite number >= 0, or 'model'")
    return value


def _hop_counts(text: str) -> tuple[int, ...]:
    """'1-6' or '1,2,4' -> hop counts."""
    out: list[int] = []
    for part in _csv(text):
        lo, sep, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(part)])
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a hop count or a range like 1-6") from None
    return tuple(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qrag-eval", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK",
                                help=f"one of: {', '.join(BENCHMARKS)}")
    for name, bench in BENCHMARKS.items():
        p = sub.add_parser(name, help=f"{bench.source} ({'tasks × lengths' if bench.tasks else 'one file'})")
        p.add_argument("--out", type=Path, required=True, help="output folder (results.jsonl is resumed)")
        p.add_argument("--methods", type=_csv, default=("bm25", "dense", "multihop", "oracle"),
                       help=f"comma-separated, from: {', '.join(METHODS)}")
        p.add_argument("--model", default=None, help="trained Q-RAG checkpoint folder (for qrag, qrag+stop)")
        p.add_argument("--encoder", default="all-MiniLM-L6-v2", help="encoder of the untrained dense baselines")
        p.add_argument("--reader", default=None, help="'smollm2', 'vllm:NAME', or a transformers model folder/name")
        p.add_argument("--num-samples", type=int, default=100, help="samples per (task, length)")
        p.add_argument("--budget", type=int, default=None,
                       help="chunks per question for non-adaptive methods (default: |SF| of each sample)")
        p.add_argument("--max-hops", type=int, default=None,
                       help="most hops of the multi-hop methods (default: the --model checkpoint's trained horizon)")
        p.add_argument("--stop-threshold", type=float, default=None,
                       help="stop rule of qrag+stop and of the guard (default: the --model checkpoint's saved threshold)")
        p.add_argument("--fill", choices=FILL_CHOICES, default=FROM_MODEL,
                       help="what ranks qrag's results past its hops: 'state' (the last state), 'question' (the "
                            "off-domain guard: hops stop where the stop rule says, or where the question's own next "
                            "passage outscores the hop, and the rest is the question's ranking as the first hop ranks "
                            "it), 'question_unguarded' (every hop, then the question's ranking), 'model' "
                            "(default: what the checkpoint saved)")
        p.add_argument("--lexical-weight", type=_weight, default=FROM_MODEL,
                       help="weight of BM25 evidence beside qrag's Q-value at every hop (0: Q alone; default 'model': "
                            "what the checkpoint saved)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--max-new-tokens", type=int, default=32)
        p.add_argument("--device", default=None)
        p.add_argument("--batch-size", type=int, default=32,
                       help="questions retrieved together (default 32; 1 measures single-question latency)")
        p.add_argument("--chunk-vectors", type=Path, default=None, metavar="DIR",
                       help="folder that keeps chunk vectors between runs, one cache per chunk tower: a repeated, "
                            "resumed or extended sweep embeds no sentence twice (created if missing)")
        p.add_argument("--precision", choices=ENCODER_PRECISIONS, default="fp32",
                       help="the encoders' arithmetic: fp32 (exact), bf16 (GPUs, CPUs with AVX512-BF16) or fp16 (GPU)")
        p.add_argument("--no-progress", action="store_true")
        _ledger_flag(p)
        if bench.tasks:
            p.add_argument("--tasks", type=_csv, default=None, help=f"comma-separated, from: {', '.join(bench.tasks)}")
        if bench.length_kind:
            p.add_argument("--lengths", type=_csv, default=None,
                           help=f"comma-separated, e.g. 1k,4k,32k or {bench.length_kind} "
                                f"(default {','.join(bench.default_lengths)})")
            p.add_argument("--samples-at", type=_samples_at, default={}, metavar="LENGTH=N,...",
                           help="samples per cell at some lengths, overriding --num-samples there (e.g. 10m=50)")
            p.add_argument("--speed-lengths", type=_csv, default=(),
                           help="before the sweep, at each of these lengths: one haystack indexed from scratch (chunks/s) "
                                "and 1..H-hop search latency and batched questions/s on it (speed.json, speed.md)")
            p.add_argument("--speed-hops", type=_hop_counts, default=None,
                           help="hop counts the speed phase times, e.g. 1-6 (default: 1 to the horizon)")
            p.add_argument("--speed-queries", type=int, default=20,
                           help="questions the speed phase times one at a time (its batch is --batch-size)")
        if bench.needs_path:
            p.add_argument("--data", required=True, help="the data file (official format, or custom JSON Lines)")
        if bench.source == "corpus":
            p.add_argument("--corpus", required=True, help="your passages: a JSON Lines file of {\"id\", \"text\"} or a "
                                                          "folder of .txt/.md files (--data holds the questions)")
        if bench.source in GENERATED:
            p.add_argument("--split", choices=SPLITS, default="test",
                           help="'test' (default), or 'val': the episodes a training run of the same --seed validates "
                                "on, to choose between models without reading the test split")
        if bench.source == "babilong":
            p.add_argument("--filler-sentences", type=int, default=None, metavar="N",
                           help="draw every haystack's background from one pool of N test-split sentences (default: "
                                "all of the text sources); fewer distinct sentences to embed")
            p.add_argument("--background", default=None, metavar="FILE",
                           help="a text file of sentences, one per line, that fills every haystack instead of the "
                                "text sources (text held out of a model's training)")
        if bench.source == "wiki":
            p.add_argument("--distractors", type=int, default=None,
                           help="non-gold passages per question (default 30); 1000 searches every test-split page")
    _ordinary_text_parser(sub)
    return parser


ORDINARY_TEXT = "ordinary-text"
"""Ordinary documents and ordinary questions (`qrag.eval.ordinary_text`): SQuAD-format pools and MultiRC."""


def _search_overrides(text: str) -> dict[str, object]:
    """'lexical_weight=0.5,fill=state' -> SearchConfig overrides (numbers parsed, 'none' -> None)."""
    out: dict[str, object] = {}
    for part in _csv(text):
        name, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{part!r} is not NAME=VALUE (e.g. lexical_weight=0.5)")
        try:
            out[name.strip()] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
        except ValueError:
            out[name.strip()] = None if value.strip().lower() == "none" else value.strip()
    return out


def _ordinary_text_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from qrag.eval.ordinary_text_data import HALVES

    p = sub.add_parser(ORDINARY_TEXT, help="SQuAD-format pools and MultiRC: the model beside cosine, BM25, hybrid")
    p.add_argument("--out", type=Path, required=True, help="output folder (summary.json, records.jsonl, table.md)")
    p.add_argument("--squad", action="append", default=[], metavar="FILE",
                   help="a SQuAD-format file: its paragraphs one pool, its questions drawn (repeat for more files)")
    p.add_argument("--multirc", default=None, metavar="FILE", help="BIG-bench's subtask049 task.json (MultiRC)")
    p.add_argument("--half", choices=HALVES, default="even",
                   help="MultiRC paragraphs by the SHA-1 of their first sentence: even (choose on it), odd "
                        "(evaluation only), all")
    p.add_argument("--model", default="qrag/hotpotqa-minilm", help="the paragraph model (default: qrag/hotpotqa-minilm)")
    p.add_argument("--sentence-models", type=_csv, default=("qrag/babilong-minilm-cpu", "qrag/babilong-minilm"),
                   help="MultiRC: more models, each searched with ordered=True")
    p.add_argument("--encoder", default="all-MiniLM-L6-v2", help="encoder of cosine and the hybrid")
    p.add_argument("--num-questions", type=int, default=500, help="questions drawn per SQuAD-format file")
    p.add_argument("--multirc-questions", type=int, default=300, help="MultiRC questions drawn from the half")
    p.add_argument("--ks", type=lambda t: tuple(int(x) for x in _csv(t)), default=(1, 2, 5, 10),
                   help="k of the SQuAD-format tables (default 1,2,5,10)")
    p.add_argument("--search", type=_search_overrides, default={},
                   help="search settings of the model's searches, e.g. lexical_weight=0,fill=state (default: its own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-vectors", type=Path, default=None, metavar="DIR",
                   help="folder that keeps chunk vectors between runs")
    p.add_argument("--long-chunks", choices=("windows", "cut"), default="windows",
                   help="passages longer than the model reads: scored by their best window (the retrievers' "
                        "default) or cut to their first window")
    _ledger_flag(p)


def _ledger_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ledger", type=Path, default=None, metavar="FILE",
                   help="where a read of evaluation-only data is recorded (default: $QRAG_EVAL_LEDGER, else "
                        "results/eval_reads.jsonl of the checkout)")


def _record_reads(rows: list[dict[str, object]], ledger: Path | None) -> int:
    """Append the evaluation-only reads `rows` to the ledger (qrag.eval.ledger); 0, or 2 when it cannot be written."""
    if not rows:
        return 0
    from qrag.eval.ledger import append_read

    try:
        for row in rows:
            path = append_read(row, ledger)
    except (OSError, ValueError) as e:
        print(f"qrag-eval: error: this run read evaluation-only data and its read could not be recorded: "
              f"{one_line(e)}; pass --ledger FILE where it can be written.", file=sys.stderr)
        return 2
    print(f"recorded {len(rows)} evaluation-only read(s) in {path}: {', '.join(str(r['file']) for r in rows)}",
          file=sys.stderr)
    return 0


def _ordinary_text(args: argparse.Namespace, command: list[str]) -> int:
    if not args.squad and args.multirc is None:
        print("qrag-eval: error: ordinary-text needs --squad FILE and/or --multirc FILE.", file=sys.stderr)
        return 2
    for name in ("num_questions", "multirc_questions"):
        if getattr(args, name) < 1:
            print(f"qrag-eval: error: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.",
                  file=sys.stderr)
            return 2
    if not args.ks or min(args.ks) < 1:
        print(f"qrag-eval: error: --ks must name k >= 1, got {args.ks!r}.", file=sys.stderr)
        return 2
    from qrag.eval.ledger import ordinary_text_reads
    from qrag.eval.ordinary_text import run_cli

    try:
        code = run_cli(args)
    except (ValueError, OSError) as e:
        print(f"qrag-eval: error: {one_line(e)}", file=sys.stderr)
        return 2
    summary = json.loads((args.out / "summary.json").read_text(encoding="utf-8")) if code == 0 else None
    return _record_reads(ordinary_text_reads(args, summary, command), args.ledger) or code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `qrag-eval`; returns 0 on success, 2 on a user error (message on stderr)."""
    command = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(command)
    if args.benchmark == ORDINARY_TEXT:
        return _ordinary_text(args, command)
    cfg = RunConfig(
        benchmark=args.benchmark, out=args.out, methods=args.methods, tasks=getattr(args, "tasks", None),
        lengths=getattr(args, "lengths", None), num_samples=args.num_samples, model=args.model,
        encoder=args.encoder, reader=args.reader, data=getattr(args, "data", None),
        corpus=getattr(args, "corpus", None), budget=args.budget,
        max_hops=args.max_hops, stop_threshold=args.stop_threshold, fill=args.fill,
        lexical_weight=args.lexical_weight, seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        device=args.device, progress=not args.no_progress, batch_size=args.batch_size, chunk_vectors=args.chunk_vectors,
        distractors=getattr(args, "distractors", None), precision=args.precision,
        filler_sentences=getattr(args, "filler_sentences", None), split=getattr(args, "split", "test"),
        background=getattr(args, "background", None),
        samples_at=getattr(args, "samples_at", {}), speed_lengths=getattr(args, "speed_lengths", ()),
        speed_hops=getattr(args, "speed_hops", None), speed_queries=getattr(args, "speed_queries", 20),
    )
    try:
        cfg.validate()  # every flag checked before the model libraries load
    except ValueError as e:
        print(f"qrag-eval: error: {one_line(e)}", file=sys.stderr)
        return 2
    from qrag.eval.ledger import benchmark_reads
    from qrag.eval.reader import ReaderLoadError
    from qrag.eval.runner import RESULTS_FILE, run
    from qrag.eval.speed import SPEED_TABLE

    try:
        summary = run(cfg)
    except (ValueError, ReaderLoadError, OSError, ImportError) as e:
        # CheckpointError / EncoderLoadError / EpisodeError are ValueErrors with user-facing messages;
        # an OSError (unreadable file, full disk) names its path in its own message.
        print(f"qrag-eval: error: {one_line(e)}", file=sys.stderr)
        if args.out.is_dir() and (args.out / RESULTS_FILE).is_file() and (args.out / RESULTS_FILE).stat().st_size:
            print(f"qrag-eval: results finished so far are kept in {args.out / RESULTS_FILE}.", file=sys.stderr)
            _record_reads(benchmark_reads(cfg, None, command), args.ledger)  # questions were read: a read all the same
        return 2
    print((args.out / TABLE_FILE).read_text(encoding="utf-8") if summary["methods"] else "no results.")
    made = (RECALL_FILE, *([DRIFT_FILE] if len(cfg.lengths_resolved) > 1 else []), *([SPEED_TABLE] if cfg.speed_lengths else []))
    for extra in made:
        if (args.out / extra).is_file():
            print((args.out / extra).read_text(encoding="utf-8"))
    print(f"wrote {args.out / RESULTS_FILE}, {SUMMARY_FILE}, {TABLE_FILE}, {PLOT_FILE}")
    return _record_reads(benchmark_reads(cfg, summary, command), args.ledger)


if __name__ == "__main__":
    raise SystemExit(main())
