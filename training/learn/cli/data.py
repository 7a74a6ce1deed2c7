"""`qrag-data`: write any data source to the custom JSON Lines format, to look at what a model sees.

Examples:
    qrag-data babilong --task qa2 --num-sentences 4600 --num-samples 100 --seed 0 --out qa2-128k.jsonl
    qrag-data ruler_niah --task niah_multivalue --num-tokens 4k --num-samples 10 --out niah.jsonl
    qrag-data hotpotqa --path hotpot_dev_distractor_v1.json --out hotpot-dev.jsonl
    qrag-data corpus --corpus docs/ --out passages.jsonl      # your passages with their ids, to label questions
    qrag-data corpus --corpus docs/ --path questions.jsonl --num-distractors 20 --out episodes.jsonl
    qrag-data --list
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from qrag.training.data.episode import EpisodeError, write_jsonl
from qrag.training.data.sources import DEFAULT_NUM_SAMPLES, SOURCES, iter_episodes
from qrag.training.input_checks import check_out_path, one_line


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="qrag-data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", nargs="?", help=f"one of: {', '.join(SOURCES)}")
    ap.add_argument("--list", action="store_true", help="list the sources, their tasks and options, and exit")
    ap.add_argument("--task", help="task or subtask (bAbI qa1..qa5, RULER niah_*, qa_1/qa_2)")
    ap.add_argument("--split", default="train", help="train or test (generators; disjoint seeds)")
    ap.add_argument("--num-samples", type=int, help=f"episodes to write (generators: default {DEFAULT_NUM_SAMPLES})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--path", help="input file for loaders")
    ap.add_argument("--num-sentences", type=int, help="haystack length in sentences (babilong, ruler_niah)")
    ap.add_argument("--num-tokens", help="haystack length as a token budget: 4000, 4k, 128k, 1M, 10M")
    ap.add_argument("--sources", help="background text sources, comma-separated (shakespeare,britannica,wikipedia,kjv)")
    ap.add_argument("--token-count", choices=("estimate", "minilm"), help="how metadata.num_tokens is measured")
    ap.add_argument("--hub-id", help="read through `datasets` from this hub id instead of --path")
    ap.add_argument("--hub-config", help="hub configuration name (e.g. distractor)")
    ap.add_argument("--length", help="official BabiLong length config (0k, 1k, ... 128k)")
    ap.add_argument("--num-docs", type=int, help="RULER QA: documents per episode")
    ap.add_argument("--corpus", help="corpus source: your passages (JSON Lines of {id, text} or a folder of .txt/.md); "
                                     "without --path, the passages are written with their ids")
    ap.add_argument("--num-distractors", type=int, help="corpus, hotpotqa_pool, wiki: other passages per episode")
    ap.add_argument("--out", help="output .jsonl file (default: stdout)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0 ok, 2 bad arguments or input)."""
    args = _parser().parse_args(argv)
    try:  # refused up front, before any episode is generated
        for flag in ("num_samples", "num_sentences", "num_docs"):
            value = getattr(args, flag)
            if value is not None and value < 1:
                raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {value}.")
        if args.num_distractors is not None and args.num_distractors < 0:
            raise ValueError(f"--num-distractors must be >= 0, got {args.num_distractors}.")
        if args.out is not None:
            check_out_path(args.out, "--out", folder=False)
    except ValueError as e:
        print(f"qrag-data: error: {e}", file=sys.stderr)
        return 2
    if args.list or not args.source:
        for s in SOURCES.values():
            tasks = ", ".join(s.tasks) if s.tasks else "-"
            print(f"{s.name:14} {s.description}\n{'':14} tasks: {tasks}; options: {', '.join(s.options) or '-'}")
        return 0
    if args.source == "corpus" and args.path is None:
        return _write_passages(args.corpus, args.out)
    options: dict[str, Any] = {}
    for name in ("token_count", "hub_id", "hub_config", "length", "num_docs", "corpus", "num_distractors"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if "neighbours" in getattr(SOURCES.get(args.source), "options", ()):
        from qrag.training.search import pool_neighbours

        options["neighbours"] = pool_neighbours  # hard negatives of --num-distractors search the pool
    if args.sources:
        options["sources"] = tuple(s.strip() for s in args.sources.split(",") if s.strip())
    n = args.num_samples if args.num_samples is not None else (
        DEFAULT_NUM_SAMPLES if args.source in SOURCES and SOURCES[args.source].generator else None
    )
    t0 = time.perf_counter()
    try:
        it = iter_episodes(
            args.source, task=args.task, split=args.split, seed=args.seed, path=args.path,
            num_sentences=args.num_sentences, num_tokens=args.num_tokens, **options,
        )
        eps = it if n is None else islice(it, n)
        if args.out:
            count = write_jsonl(eps, args.out)
        else:
            import json

            count = 0
            for ep in eps:
                sys.stdout.write(json.dumps(ep.to_json(), ensure_ascii=False) + "\n")
                count += 1
    except (ValueError, OSError, EpisodeError, ImportError) as e:
        print(f"qrag-data: error: {_error(e, args.out)}", file=sys.stderr)
        return 2
    where = args.out or "stdout"
    print(f"qrag-data: wrote {count} episodes to {where} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


def _write_passages(corpus: str | None, out: str | None) -> int:
    """`qrag-data corpus --corpus PATH`: the passages as {"id", "text"} lines, the ids questions name."""
    import json

    from qrag.training.data.corpus import read_corpus

    try:
        if corpus is None:
            raise ValueError("qrag-data corpus needs --corpus PATH (a JSON Lines file of {id, text} or a folder of "
                             ".txt/.md files).")
        docs = read_corpus(corpus)
        lines = "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in zip(docs.ids, docs.texts,
                                                                                                     strict=True))
        if out:
            Path(out).write_text(lines, encoding="utf-8")
        else:
            sys.stdout.write(lines)
    except (ValueError, OSError, EpisodeError) as e:
        print(f"qrag-data: error: {_error(e, out)}", file=sys.stderr)
        return 2
    print(f"qrag-data: wrote {len(docs.ids)} passages of {corpus} to {out or 'stdout'}", file=sys.stderr)
    return 0


def _error(e: BaseException, out: str | None) -> str:
    """`e` as one line; a failed write of `out` (or of the temporary file it is written through) names --out: the
    checks before the run cannot foresee every failure (a full disk)."""
    if out is not None and isinstance(e, OSError) and e.filename is not None:
        if Path(e.filename) in (Path(out), Path(f"{out}.tmp")):
            return (f"--out {out!r} cannot be written ({e.strerror}); pass a file in a folder you can write to, on a "
                    "disk with room for it.")
    return one_line(e)


if __name__ == "__main__":
    raise SystemExit(main())
