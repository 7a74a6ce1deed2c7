"""Score model folders on a finished `qrag-adapt` run's held-out questions, the way its choice scores a candidate.

Each model (a fine-tune's checkpoint at some number of updates, the run's shipped model) is searched over the whole
corpus with its own stop threshold calibrated at each horizon (`held_out_scores`, METHOD.md §3.10), beside the run's
start, on the start's own validation rows too: a learning curve on built held-out questions, with paired 95%
intervals against the start. Validation data only: the questions are the run's own; no evaluation file is read.
The run's folder is not written: its question files, vectors and record are copied into WORK first.

    python experiments/adapt_checkpoints.py runs/adapt_long runs/snap_224 runs/snap_600 runs/adapt_long/model \
        --work runs/adapt_checkpoints --out experiments/results/adapt_checkpoints.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from adapt_learning_rate import reopen  # this folder's twin: a finished run copied and loaded

from qrag.eval.metrics import paired_margin
from qrag.training.model.qnet import QNetwork


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a finished qrag-adapt --out folder")
    p.add_argument("models", type=Path, nargs="+", help="model folders to score (the run's checkpoints, its model)")
    p.add_argument("--work", type=Path, required=True, help="a new folder the run's work files are copied into")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    for model in a.models:
        if not model.is_dir():
            raise SystemExit(f"{model} is no model folder.")
    run = reopen(a.run, a.work, a.threads)
    scores: dict[str, Any] = {}
    for name, net in [("start", run.start), *((str(m), QNetwork.from_pretrained(str(m)).eval()) for m in a.models)]:
        tick = time.perf_counter()
        with torch.no_grad():
            scores[name] = run._score(net, 1.0)
        scores[name]["seconds"] = time.perf_counter() - tick
        line = ", ".join(f"{h} hops {v:.3f}" for h, v in scores[name]["held_out"].items())
        print(f"{name}: held-out recall@5 {line}; the start's own data {scores[name].get('start_score', float('nan')):.3f}",
              flush=True)
    start = scores["start"]["per_question"]
    for s in scores.values():
        s["vs_start"] = {h: paired_margin(v, start[h]) for h, v in s["per_question"].items()}
    summary = {name: {"held_out": s["held_out"], "vs_start": s["vs_start"], "start_score": s.get("start_score")}
               for name, s in scores.items()}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"command": "python experiments/adapt_checkpoints.py " + " ".join(
        [str(a.run), *map(str, a.models), "--work", str(a.work), "--out", str(a.out)]),
        "questions": len(run.held_out), "summary": summary, "scores": scores}, indent=1), encoding="utf-8")
    for name, s in summary.items():
        best = max(s["held_out"], key=lambda h: s["held_out"][h])
        mean, half = s["vs_start"][best]
        print(f"{name}: best horizon {best}, recall@5 {s['held_out'][best]:.3f} ({mean:+.3f} ± {half:.3f} vs the start)")
    print(f"mean seconds a model: {statistics.fmean(s['seconds'] for s in scores.values()):.0f}")


if __name__ == "__main__":
    main()
