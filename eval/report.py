"""Reports of a sweep: `summary.json`, `table.md` (one row per method, one column per length), `plot.png`.

Means are taken per (method, task, length) cell, then averaged over tasks per (method, length), which is
BabiLong's headline (mean over qa1–qa5). Records are sorted by key first, so a resumed sweep and an
uninterrupted one give the same numbers (timings aside).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SUMMARY_FILE, TABLE_FILE, PLOT_FILE, MARGINS_FILE = "summary.json", "table.md", "plot.png", "margins.md"
DRIFT_FILE = "drift.md"
RECALL_FILE = "recall.md"
METRICS = ("accuracy", "answer_em", "answer_f1", "fact_f1", "fact_em", "fact_precision", "fact_recall",
           "recall_at_1", "num_retrieved", "hops", "encoder_calls", "num_tokens", "retrieval_s", "latency_s")
RATES = ("encoder_call_s", "index_chunks_per_s")
"""Per cell, ratios of sums: retrieval seconds per query-side encoder call (one per hop, plus the top-up or the
stop rule's last look), and chunks embedded per second of computing chunk vectors (cells whose chunks all came
from the cache have none)."""
TABLE_METRICS = ("accuracy", "answer_f1", "fact_f1", "fact_em", "recall_at_1", "num_retrieved", "hops",
                 "encoder_calls", "latency_s", "encoder_call_s", "index_chunks_per_s")
LABELS = {"accuracy": "answer accuracy", "answer_f1": "answer F1", "fact_f1": "Fact F1", "fact_em": "Fact EM",
          "recall_at_1": "recall@1", "num_retrieved": "chunks retrieved per question", "hops": "hops per question",
          "encoder_calls": "encoder calls per question",
          "latency_s": "latency per question (s)",
          "encoder_call_s": "retrieval seconds per encoder call (one per hop)",
          "index_chunks_per_s": "indexing: chunks embedded per second (new chunks only)"}
DIGITS = {"latency_s": 4, "encoder_call_s": 4, "index_chunks_per_s": 0}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _means(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {"n": float(len(records))}
    for m in METRICS:
        vals = [float(r[m]) for r in records if r.get(m) is not None]
        if vals:
            out[m] = _mean(vals)
    calls = sum(r.get("encoder_calls") or 0 for r in records)
    if calls:
        out["encoder_call_s"] = sum(r.get("retrieval_s") or 0.0 for r in records) / calls
    embedded, index_s = sum(r.get("chunks_embedded") or 0 for r in records), sum(r.get("index_s") or 0.0 for r in records)
    if embedded and index_s > 0:
        out["index_chunks_per_s"] = embedded / index_s
    return out


def _ordered(values: Sequence[str], order: Sequence[str]) -> list[str]:
    seen = list(dict.fromkeys(values))
    return sorted(seen, key=lambda v: (order.index(v) if v in order else len(order), v))


def summarize(records: Sequence[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """Aggregate per-sample records into per-cell and per-(method, length) means.

    Args:
        records: Rows of `results.jsonl` for this sweep.
        settings: The sweep's settings (recorded as they are).
    """
    records = sorted(records, key=lambda r: r["key"])
    methods = _ordered([r["method"] for r in records], settings.get("methods") or ())
    lengths = _ordered([r["length"] for r in records], settings.get("lengths") or ())
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        cells[(r["method"], r["task"], r["length"])].append(r)
    cell_rows: list[dict[str, Any]] = [
        {"method": m, "task": t, "length": lab, **_means(rs)} for (m, t, lab), rs in sorted(cells.items())
    ]
    by_length: dict[str, dict[str, dict[str, float]]] = {}
    for m in methods:
        by_length[m] = {}
        for lab in lengths:
            rows = [c for c in cell_rows if c["method"] == m and c["length"] == lab]
            if rows:
                keys = [k for k in (*METRICS, *RATES) if all(k in c for c in rows)]
                by_length[m][lab] = {"n": sum(c["n"] for c in rows), **{k: _mean([c[k] for c in rows]) for k in keys}}
    has_acc = any("accuracy" in r for r in records)
    return {
        "settings": settings,
        "methods": methods,
        "lengths": lengths,
        "primary_metric": "accuracy" if has_acc else "fact_em",
        "cells": cell_rows,
        "by_length": by_length,
    }


def markdown_table(summary: dict[str, Any]) -> str:
    """One Markdown table per metric: a row per method, a column per length (mean over tasks)."""
    methods, lengths, by = summary["methods"], summary["lengths"], summary["by_length"]
    tokens = {lab: [by[m][lab]["num_tokens"] for m in methods if "num_tokens" in by[m].get(lab, {})] for lab in lengths}
    heads = [f"{lab} (~{_mean(t) / 1000:.1f}K tok)" if t else lab for lab, t in tokens.items()]
    parts = []
    for metric in TABLE_METRICS:
        if not any(metric in by[m].get(lab, {}) for m in methods for lab in lengths):
            continue
        digits = DIGITS.get(metric, 3)
        lines = [f"**{LABELS[metric]}**", "", "| method | " + " | ".join(heads) + " |",
                 "|---|" + "---|" * len(lengths)]
        for m in methods:
            cells = [f"{by[m][lab][metric]:.{digits}f}" if metric in by[m].get(lab, {}) else "–" for lab in lengths]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    n = {int(by[m][lab]["n"]) for m in methods for lab in lengths if lab in by[m]}
    return f"Samples per (method, length), all tasks: {sorted(n)}\n\n" + "\n\n".join(parts) + "\n"


def margins(records: Sequence[dict[str, Any]], method: str, baselines: Sequence[str],
            metric: str = "fact_em") -> list[dict[str, Any]]:
    """Per (task, length): `method` against the best of `baselines` there, paired by sample id.

    The best baseline is the one with the highest mean `metric` in that cell; the margin is the mean
    per-sample difference with its 95% interval (`metrics.paired_margin`), over the samples both have.
    """
    from qrag.eval.metrics import paired_margin

    cells: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        if metric in r:
            cells[(r["task"], r["length"])][r["method"]][r["id"]] = float(r[metric])
    out = []
    for (task, length), by_method in cells.items():
        ours = by_method.get(method)
        others = {b: by_method[b] for b in baselines if by_method.get(b)}
        if not ours or not others:
            continue
        best = max(others, key=lambda b: _mean(list(others[b].values())))
        ids = sorted(set(ours) & set(others[best]))
        margin, half = paired_margin([ours[i] for i in ids], [others[best][i] for i in ids])
        out.append({"task": task, "length": length, "method": method, "best_baseline": best, "n": len(ids),
                    "method_mean": _mean([ours[i] for i in ids]), "baseline_mean": _mean([others[best][i] for i in ids]),
                    "margin": margin, "ci95": half, "ahead": margin - half > 0})
    return out


def margins_table(rows: Sequence[dict[str, Any]], metric: str = "fact_em") -> str:
    """Markdown for `margins`: one line per (task, length)."""
    lines = [f"| task | length | {metric}: method | best baseline | margin (95% CI, paired) | n | ahead |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['length']} | {r['method']} {r['method_mean']:.3f} | {r['best_baseline']} "
                     f"{r['baseline_mean']:.3f} | {r['margin']:+.3f} ± {r['ci95']:.3f} | {r['n']} | "
                     f"{'yes' if r['ahead'] else 'no'} |")
    return "\n".join(lines) + "\n"


def write_margins(records: Sequence[dict[str, Any]], methods: Sequence[str], baselines: Sequence[str], out: Path,
                  metric: str = "fact_em") -> Path:
    """Write margins.md into `out`: each of `methods` against the best of `baselines` per cell (`margins`)."""
    path = out / MARGINS_FILE
    path.write_text("\n".join(margins_table(margins(records, m, baselines, metric), metric) for m in methods),
                    encoding="utf-8")
    return path


def drift_rows(records: Sequence[dict[str, Any]], methods: Sequence[str], short: str, long: str,
               metric: str = "fact_em") -> list[dict[str, Any]]:
    """`metric` at length `long` against `short`, per (task, method), paired by sample id.

    Sample i of a generated cell is the same story or needle set at every length (its id carries no length),
    so the pairs say what the longer haystack alone changed: the paired difference with its 95% interval
    (`paired_margin`) and how many samples were lost or gained at `long`.
    """
    from qrag.eval.metrics import paired_margin

    by: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for r in records:
        if metric in r and r["length"] in (short, long):
            by[(r["method"], r["task"], r["length"])][r["id"]] = float(r[metric])
    rows = []
    for m in methods:
        for task in sorted({r["task"] for r in records}):
            a, b = by.get((m, task, short), {}), by.get((m, task, long), {})
            ids = sorted(set(a) & set(b))
            if not ids:
                continue
            xs, ys = [a[i] for i in ids], [b[i] for i in ids]
            diff, half = paired_margin(ys, xs)
            rows.append({"method": m, "task": task, "n": len(ids), "short": _mean(xs), "long": _mean(ys),
                         "diff": diff, "ci95": half, "lost": sum(x > y for x, y in zip(xs, ys, strict=True)),
                         "gained": sum(y > x for x, y in zip(xs, ys, strict=True))})
    return rows


def write_drift(records: Sequence[dict[str, Any]], methods: Sequence[str], lengths: Sequence[str], out: Path,
                metric: str = "fact_em") -> Path | None:
    """Write drift.md into `out`: `metric` at the last of `lengths` against the first (`drift_rows`); None
    when no sample was run at both."""
    rows = drift_rows(records, methods, lengths[0], lengths[-1], metric)
    if not rows:
        return None
    label = LABELS.get(metric, metric)
    lines = [f"{label} at {lengths[-1]} against {lengths[0]}, paired by sample (± 95% interval):", "",
             f"| method | task | n | {lengths[0]} | {lengths[-1]} | difference | lost | gained |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['task']} | {r['n']} | {r['short']:.3f} | {r['long']:.3f} | "
              f"{r['diff']:+.3f} ± {r['ci95']:.3f} | {r['lost']} | {r['gained']} |" for r in rows]
    path = out / DRIFT_FILE
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def recall_rows(records: Sequence[dict[str, Any]], methods: Sequence[str], ks: Sequence[int],
                reference: str = "dense") -> list[dict[str, Any]]:
    """recall@k per (task, method, k) and each method's paired margin against `reference` (95% interval).

    Rows cover every task and, when there are several, 'all' of them; a sample counts for a method only
    where `reference` has the same sample (paired by task and id).
    """
    by: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(dict)
    for r in records:
        for k in ks:
            if f"recall_at_{k}" in r:
                by[(r["method"], str(k))][f"{r['task']}|{r['id']}"] = float(r[f"recall_at_{k}"])
    tasks = sorted({r["task"] for r in records})
    rows = []
    for task in [*tasks, "all"] if len(tasks) > 1 else tasks:
        for m in methods:
            for k in ks:
                ours, ref = by.get((m, str(k)), {}), by.get((reference, str(k)), {})
                ids = sorted(i for i in ours if i in ref and (task == "all" or i.split("|", 1)[0] == task))
                if not ids:
                    continue
                rows.append(_with_margin({"task": task, "method": m, "k": k, "n": len(ids),
                                          "recall": _mean([ours[i] for i in ids])}, ours, ref, ids, m == reference))
    return rows


def _with_margin(row: dict[str, Any], ours: dict[str, float], ref: dict[str, float], ids: Sequence[str],
                 is_reference: bool) -> dict[str, Any]:
    """`row` with the paired margin of `ours` over `ref` on the samples `ids` (95% interval), unless `row` is the
    reference's own."""
    from qrag.eval.metrics import paired_margin

    if not is_reference:
        margin, half = paired_margin([ours[i] for i in ids], [ref[i] for i in ids])
        row.update({"margin": margin, "ci95": half, "ahead": margin - half > 0})
    return row


def recall_table(rows: Sequence[dict[str, Any]], reference: str = "dense") -> str:
    """Markdown for `recall_rows`: one line per (task, method), recall@k and the margin against `reference`."""
    ks = sorted({r["k"] for r in rows})
    head = " | ".join(f"recall@{k} (vs {reference})" for k in ks)
    lines = [f"| task | method | n | {head} |", "|---|---|---|" + "---|" * len(ks)]
    cells: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        cells[(r["task"], r["method"])][r["k"]] = r
    for (task, m), per_k in cells.items():
        parts = []
        for k in ks:
            r = per_k.get(k)
            if r is None:
                parts.append("-")
            elif "margin" in r:
                parts.append(f"{r['recall']:.3f} ({r['margin']:+.3f} ± {r['ci95']:.3f})")
            else:
                parts.append(f"{r['recall']:.3f}")
        n = max(r["n"] for r in per_k.values())
        lines.append(f"| {task} | {m} | {n} | " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n"


def write_recall(records: Sequence[dict[str, Any]], methods: Sequence[str], out: Path, ks: Sequence[int],
                 reference: str = "dense", suffix: str = "") -> Path:
    """Write recall.md and recall.json into `out` (`recall_rows` against `reference`; `suffix` is added to both
    names, e.g. '_vs_cosine')."""
    rows = recall_rows(records, methods, ks, reference)
    stem = Path(RECALL_FILE).stem + suffix
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    path = out / f"{stem}.md"
    path.write_text(recall_table(rows, reference), encoding="utf-8")
    return path


def paired_rows(records: Sequence[dict[str, Any]], methods: Sequence[str], metric: str,
                reference: str = "dense") -> list[dict[str, Any]]:
    """`metric`'s mean per (task, method) and each method's paired margin against `reference` (95% interval),
    over the samples both have (paired by task and id)."""
    by: dict[str, dict[str, float]] = defaultdict(dict)
    for r in records:
        if metric in r:
            by[r["method"]][f"{r['task']}|{r['id']}"] = float(r[metric])
    rows = []
    for task in sorted({r["task"] for r in records}):
        for m in methods:
            ours, ref = by.get(m, {}), by.get(reference, {})
            ids = sorted(i for i in ours if i in ref and i.split("|", 1)[0] == task)
            if not ids:
                continue
            rows.append(_with_margin({"task": task, "method": m, "metric": metric, "n": len(ids),
                                      "mean": _mean([ours[i] for i in ids])}, ours, ref, ids, m == reference))
    return rows


def write_paired(records: Sequence[dict[str, Any]], methods: Sequence[str], metric: str, out: Path, name: str,
                 reference: str = "dense") -> Path:
    """Write `name`.md and `name`.json into `out` (`paired_rows` of `metric` against `reference`)."""
    rows = paired_rows(records, methods, metric, reference)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    lines = [f"| task | method | n | {metric} (vs {reference}) |", "|---|---|---|---|"]
    for r in rows:
        cell = f"{r['mean']:.3f}" + (f" ({r['margin']:+.3f} ± {r['ci95']:.3f})" if "margin" in r else "")
        lines.append(f"| {r['task']} | {r['method']} | {r['n']} | {cell} |")
    path = out / f"{name}.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def plot(summary: dict[str, Any], path: Path) -> Path:
    """Accuracy (or Fact EM without a reader) against context length, one line per method (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [summary["primary_metric"]] + (["fact_em"] if summary["primary_metric"] != "fact_em" else [])
    methods, lengths, by = summary["methods"], summary["lengths"], summary["by_length"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for m in methods:
            xs = [i for i, lab in enumerate(lengths) if metric in by[m].get(lab, {})]
            ax.plot(xs, [by[m][lengths[i]][metric] for i in xs], marker="o", label=m)
        ax.set_xticks(range(len(lengths)), lengths)
        ax.set_xlabel("context length")
        ax.set_ylabel(LABELS[metric])
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"qrag-eval: {summary['settings'].get('benchmark', '')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_reports(summary: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write summary.json, table.md and plot.png into `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"summary": out / SUMMARY_FILE, "table": out / TABLE_FILE, "plot": out / PLOT_FILE}
    paths["summary"].write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if summary["methods"]:
        paths["table"].write_text(markdown_table(summary), encoding="utf-8")
        plot(summary, paths["plot"])
    return paths
