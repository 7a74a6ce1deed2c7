"""`qrag-adapt`'s DIR/report.md: its questions, validation table, choice and the minutes of each phase."""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from qrag.training.learn.adapt.choice import CHOICE_K, FEW_UPDATES, HARM_TOLERANCE, START_HOPS
from qrag.training.model.precision import cpu_bf16_support, speed_flags

if TYPE_CHECKING:
    from qrag.training.learn.adapt.folder import AdaptFolder, AdaptOptions, Record

CURVE_ROWS = 8
"""Most rows of the run's learning curve in the report."""
PHASES = {"set-up": "reading the corpus, building questions, checks", "questions": "writing the question files",
          "embed": "embedding the corpus", "start": "scoring the start", "train": "training",
          "choose": "scoring blends, choosing, saving the model and the corpus's index", "report": "this report"}


def machine() -> str:
    """The CPU, its speed flags, whether this process runs bf16 natively (an AVX2-only CPU, or one kept to AVX2, does
    not), threads and torch: the line every timing is read with."""
    _, bf16 = cpu_bf16_support()
    return (f"{platform.processor() or platform.machine()} ({', '.join(speed_flags()) or 'no AVX2'}; {bf16}), "
            f"{torch.get_num_threads()} threads, torch {torch.__version__}")


def write_report(folder: AdaptFolder, record: Record, options: AdaptOptions) -> None:
    """Write DIR/report.md from the run's record."""
    f = record.facts
    lines = [
        "# qrag-adapt", "",
        f"`{options.init}` taught the corpus `{options.corpus}` ({f['passages']} passages)"
        + (f" with the labelled questions of `{options.questions}`" if options.questions else ", without labels")
        + f"; the model: `{folder.model}` (it loads anywhere a model does: `QRAGRetriever.from_texts(texts, "
        f"model=\"{folder.model}\")`, `qrag-eval --model {folder.model}`); with the corpus already embedded: "
        f"`QRAGRetriever.load_local(\"{folder.searcher}\")`. Machine: {machine()}.", "",
        "## Questions", "",
        f"Built from the corpus: **{f['built']}** ({', '.join(f'{n} {k}' for k, n in sorted(f['kinds'].items()))}); "
        f"labelled: {f['labelled']}. Training: {f['train_questions']}; held out to choose on: "
        f"{f['held_out_questions']} ({'the labelled ones score the choice' if f['held_out_from'] == 'labelled' else 'built ones'}). "
        f"Horizon trained: {f['horizon']} hops (the median number of supporting passages; the start's: "
        f"{f['start_horizon']}). Rehearsed: {f.get('rehearsed', 0)} of the start's own training questions."
        + (f" Each labelled training question is drawn {f['labelled_repeats']} times as often as a built one, so "
           "that they are at least half of the run's own episodes." if f.get("labelled_repeats", 1) > 1 else ""), "",
        "Ten of its training questions, with their passages (in a fan-out, the first names the others; in an "
        "in-link question, each names the passage it asks about):", "",
    ]
    for i, ex in enumerate(f["examples"], 1):
        lines.append(f"{i}. **{ex['question']}** ({ex['kind']})")
        lines += [f"   - `{pid}`: {text}{'…' if len(text) >= 240 else ''}" for pid, text in ex["passages"]]
    lines += ["", "## Validation", "",
              f"Held-out recall@{CHOICE_K}: the share of a held-out question's passages among the {CHOICE_K} results of "
              "the whole corpus, searched as a user would (the model's own lexical weight and fill), at each horizon. "
              f"The start's own data: {f.get('start_data') or 'none'}; fact recall of {START_HOPS} greedy hops.", ""]
    lines += _table(f)
    choice = f.get("choice")
    if choice:
        lines += ["", "## Choice", "",
                  f"**The fine-tune's share w = {choice['weight']:g}, {choice['horizon']} hops** (the fine-tune: the "
                  f"run's `{choice['tuned']}/` checkpoint). {choice['why']} The rule: never worse than the start (a blend "
                  "finding fewer held-out passages than the start at its best horizon is refused, and the start ships "
                  f"if every blend is); among the candidates within {HARM_TOLERANCE} of the start on its own data, those "
                  "within one paired standard error of the highest held-out recall; of them the largest weight, at its "
                  "best horizon (a tie: the shorter). Each "
                  "candidate is searched with its own stop threshold, calibrated on its hops over the held-out "
                  "questions at each horizon (a blend's Q-values are its own); the choice ships with the threshold "
                  f"it was scored with{_threshold(f, choice)}."]
    train = f.get("train") or {}
    if train:
        seconds = record.seconds.get("train", 0.0)
        lines += ["", "## Training", "",
                  f"**{train.get('updates', 0)} updates** ({train.get('transitions', 0)} transitions) in "
                  f"{seconds / 60:.1f} minutes ({100 * seconds / (60 * options.minutes):.0f} % of the "
                  f"{options.minutes:g}-minute budget), "
                  + (f"the top {f['train_layers']} layer(s) of the state tower trained." if f.get("train_layers")
                     else "every layer of the state tower trained.")]
        if int(train.get("updates", 0)) < FEW_UPDATES:
            lines += ["", f"**Too few updates to matter** (fewer than {FEW_UPDATES}): the fine-tune is close to the "
                      "start. Run it again with more `--minutes` (it goes on from where it stopped), or on a faster "
                      "machine."]
        lines += ["", ", ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}"
                                for k, v in sorted(train.items()))]
        lines += learning_curve(folder.work / "run" / "metrics.jsonl")
    lines += ["", "## Time", "", "| phase | minutes |", "|---|---|"]
    lines += [f"| {PHASES.get(name, name)} | {s / 60:.1f} |" for name, s in record.seconds.items()]
    lines += [f"| **in all** | **{record.spent / 60:.1f}** (budget {options.minutes:g}) |", ""]
    folder.report.write_text("\n".join(lines), encoding="utf-8")


def learning_curve(metrics: Path, rows: int = CURVE_ROWS) -> list[str]:
    """The run's own learning curve from the trainer's metrics.jsonl: at most `rows` of its logged points, evenly
    spaced and the last always kept: transitions, updates, the training episodes' fact recall (the share of a
    question's passages its hops found while acting) and the TD loss. Empty when the file is missing or logs none."""
    if not metrics.is_file():
        return []
    logged = [r for r in (json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip())
              if "charts/fact_recall" in r and "transitions" in r]
    if not logged:
        return []
    step = max(1, math.ceil(len(logged) / rows))
    kept = logged[::step]
    if kept[-1] is not logged[-1]:
        kept = [*kept[: rows - 1], logged[-1]]
    out = ["", "### The run's learning curve", "",
           "What the training questions' own hops found while it acted (exploring, so below what its search finds), "
           "logged as it trained:", "", "| transitions | updates | training questions' fact recall | TD loss |",
           "|---|---|---|---|"]
    for r in kept:
        updates = r.get("charts/updates")
        loss = r.get("losses/td_loss")
        out.append(f"| {int(r['transitions'])} | {'–' if updates is None else int(updates)} | "
                   f"{float(r['charts/fact_recall']):.3f} | {'–' if loss is None else f'{float(loss):.4f}'} |")
    return out


def _table(f: dict[str, Any]) -> list[str]:
    candidates = f.get("candidates") or []
    if not candidates:
        start = f.get("start") or {}
        candidates = [{"weight": 0.0, "horizon": int(h), "held_out": v, "start_score": start.get("start_score")}
                      for h, v in (start.get("held_out") or {}).items()]
    horizons = sorted({c["horizon"] for c in candidates})
    head = ["candidate", *(f"held-out recall@{CHOICE_K}, {h} hops" for h in horizons), "start's own data"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    chosen = f.get("choice") or {}
    for w in sorted({c["weight"] for c in candidates}):
        rows = {c["horizon"]: c for c in candidates if c["weight"] == w}
        name = "the start (w = 0)" if w == 0 else f"blend w = {w:g}" if w < 1 else "the fine-tune (w = 1)"
        cells = []
        for h in horizons:
            cell = f"{rows[h]['held_out']:.3f}" if h in rows else "–"
            if chosen.get("weight") == w and chosen.get("horizon") == h:
                cell = f"**{cell}** (chosen)"
            cells.append(cell)
        score = next(iter(rows.values()))["start_score"]
        out.append(f"| {name} | {' | '.join(cells)} | {'–' if score is None else f'{score:.3f}'} |")
    return out


def _threshold(f: dict[str, Any], choice: dict[str, Any]) -> str:
    """", T": the chosen candidate's stop threshold, where the record holds it (empty in older records)."""
    found = [c.get("stop_threshold") for c in f.get("candidates") or []
             if c["weight"] == choice["weight"] and c["horizon"] == choice["horizon"]]
    return f", {found[0]:.3f}" if found and found[0] is not None else ""
