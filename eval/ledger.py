"""The ledger of evaluation-only reads: one JSON line per read, appended, never rewritten.

`qrag-eval` appends a line each time a run reads evaluation-only data (`qrag.training.data.evaluation_only`): the file's
name and sha256, the rows read, the model, the settings, the date, the command and the figures. Counting the lines
of one file tells how many times it was read for a model; the count stands in docs/RESULTS.md.

The ledger is `results/eval_reads.jsonl` of the checkout qrag runs from (else of the current folder); the
environment variable `QRAG_EVAL_LEDGER` or `qrag-eval --ledger PATH` names another (tests write to a temporary one).
A line is written with one `write` call on a file opened for appending, then flushed to disk: lines of runs that
finish together do not interleave, and a crash leaves at most a last line cut short, which `read_ledger` skips.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["LEDGER_ENV", "LEDGER_NAME", "append_read", "default_ledger", "read_counts", "read_ledger"]

LEDGER_ENV = "QRAG_EVAL_LEDGER"
LEDGER_NAME = "eval_reads.jsonl"
_CHECKOUT = Path(__file__).resolve().parents[1]


def default_ledger() -> Path:
    """`$QRAG_EVAL_LEDGER`, else the checkout's `results/eval_reads.jsonl`, else `results/eval_reads.jsonl` here."""
    named = os.environ.get(LEDGER_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "results").is_dir():
        return _CHECKOUT / "results" / LEDGER_NAME
    return Path("results") / LEDGER_NAME


def append_read(row: dict[str, Any], ledger: str | Path | None = None) -> Path:
    """Append `row` as one line to the ledger (created with its folder if missing); returns the ledger's path.

    Raises:
        ValueError: `row` cannot be written as JSON (its message names the row's keys).
        OSError: the ledger cannot be written.
    """
    path = Path(ledger).expanduser() if ledger is not None else default_ledger()
    try:
        line = json.dumps(row, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise ValueError(f"an evaluation read with keys {sorted(row)} cannot be written as JSON ({e}).") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    data = line.encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # A file that ends without a newline lost its last line's end in a crash: start this line on a line of its own.
        if os.fstat(fd).st_size and os.pread(fd, 1, os.fstat(fd).st_size - 1) != b"\n":
            data = b"\n" + data
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"wrote {written} of {len(data)} bytes of an evaluation read to {path}; the disk may be full.")
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def read_ledger(ledger: str | Path | None = None) -> list[dict[str, Any]]:
    """Every complete line of the ledger, in order (a line cut short by a crash is skipped; no ledger: [])."""
    path = Path(ledger).expanduser() if ledger is not None else default_ledger()
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_counts(rows: Iterable[dict[str, Any]], model: str | None = None) -> Counter[str]:
    """How many reads each evaluation file has in `rows` (of `model` alone, if given), by the file's name. A line of
    another kind (`"kind": "release"`: a file that is evaluation only no more, and since when) is no read."""
    return Counter(str(r.get("file")) for r in rows
                   if r.get("kind", "read") == "read" and (model is None or r.get("model") == model))


def _commit() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                             cwd=_CHECKOUT, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _read_row(found: Any, rows: str, *, benchmark: str, model: str | None, settings: dict[str, Any],
              figures: dict[str, Any] | None, machine: Any, command: list[str], out: Path) -> dict[str, Any]:
    """One ledger line for the evaluation-only file `found` (a `Recognised`)."""
    import time

    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "file": found.name, "path": found.path,
            "sha256": found.sha256, "recognised_by": list(found.by), "rows": rows, "benchmark": benchmark,
            "model": model, "settings": settings, "figures": figures, "finished": figures is not None,
            "machine": machine, "command": " ".join(["qrag-eval", *command]), "out": str(out), "commit": _commit()}


def _plain(value: Any) -> Any:
    """`value` as JSON keeps it: paths as strings, tuples as lists, floats rounded to 4 places."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def benchmark_reads(cfg: Any, summary: dict[str, Any] | None, command: list[str]) -> list[dict[str, Any]]:
    """The evaluation-only reads of a finished (or, with `summary` None, stopped) `qrag-eval BENCHMARK` run `cfg`
    (a `RunConfig`): its --data and --corpus files recognised, and HotpotQA's test rows."""
    from qrag.eval.sweep import BENCHMARKS
    from qrag.training.data.evaluation_only import HOTPOTQA_TEST, Recognised, file_sha256, recognise

    files = [f for f in (cfg.data, cfg.corpus) if f is not None]
    found: list[tuple[Recognised, str]] = [(r, "all") for r in map(recognise, files) if r is not None]
    bench = BENCHMARKS[cfg.benchmark]
    if bench.source == "hotpotqa_pool" and "test" in (cfg.tasks or bench.default_tasks or ()):
        from qrag.training.data import hotpot_pool

        try:
            path = hotpot_pool.halueval_path()
            sha = file_sha256(path)
        except OSError:  # the file is missing: no row of it was read
            pass
        else:
            known = HOTPOTQA_TEST if sha == HOTPOTQA_TEST.sha256 else None
            found.append((Recognised(str(path), sha, known, ("content",) if known else ("rows",)),
                          "9 000-9 999 (test)"))
    if not found:
        return []
    settings = _plain({"methods": cfg.methods, "tasks": cfg.tasks, "lengths": cfg.lengths,
                       "num_samples": cfg.num_samples, "budget": cfg.budget, "max_hops": cfg.max_hops,
                       "stop_threshold": cfg.stop_threshold, "fill": cfg.fill, "lexical_weight": cfg.lexical_weight,
                       "seed": cfg.seed, "precision": cfg.precision, "encoder": cfg.encoder})
    figures = None
    if summary is not None:
        figures = {m: {lab: {k: v for k, v in cell.items() if k in ("n", "fact_em", "fact_recall", "accuracy")}
                       for lab, cell in by.items()} for m, by in summary.get("by_length", {}).items()}
        recall = cfg.out / "recall.json"
        if recall.is_file():
            for r in json.loads(recall.read_text(encoding="utf-8")):
                figures.setdefault(r["method"], {}).setdefault(str(r.get("task", "-")), {})[f"recall@{r['k']}"] = \
                    r["recall"]
        figures = _plain(figures)
    return [_read_row(f, rows, benchmark=cfg.benchmark, model=cfg.model, settings=settings, figures=figures,
                      machine=(summary or {}).get("machine"), command=command, out=cfg.out) for f, rows in found]


def ordinary_text_reads(args: Any, summary: dict[str, Any] | None, command: list[str]) -> list[dict[str, Any]]:
    """The evaluation-only reads of a `qrag-eval ordinary-text` run (`args`, its parsed flags): each --squad file
    recognised, and MultiRC's odd half (read with --half odd or all)."""
    from qrag.training.data.evaluation_only import MULTIRC_ODD, Recognised, file_sha256, recognise

    parts = (summary or {}).get("parts", {})
    settings = _plain({"search": args.search, "num_questions": args.num_questions, "seed": args.seed, "ks": args.ks,
                       "long_chunks": args.long_chunks, "encoder": args.encoder})
    rows = []
    for path in args.squad:
        found = recognise(path)
        if found is not None:
            part = parts.get(Path(path).stem)
            figures = _plain(part["means"]) if part else None
            rows.append(_read_row(found, "all", benchmark="ordinary-text", model=args.model, settings=settings,
                                  figures=figures, machine=(summary or {}).get("machine"), command=command,
                                  out=args.out))
    if args.multirc is not None and args.half in ("odd", "all"):
        sha = file_sha256(args.multirc)
        known = MULTIRC_ODD if sha == MULTIRC_ODD.sha256 else None
        found = Recognised(str(args.multirc), sha, known, ("content",) if known else ("rows",))
        part = parts.get("multirc")
        rows.append(_read_row(found, f"{args.half} half", benchmark="ordinary-text",
                              model=",".join([args.model, *args.sentence_models]),
                              settings={**settings, "multirc_questions": args.multirc_questions},
                              figures=_plain(part["means"]) if part else None,
                              machine=(summary or {}).get("machine"), command=command, out=args.out))
    return rows
