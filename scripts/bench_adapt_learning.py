"""`qrag-adapt`'s training step on a CPU, per `trainer.train_layers`, side by side in one process: transitions per
second and where the time goes (acting, update), on the run's own questions and corpus.

    OMP_NUM_THREADS=2 python scripts/bench_adapt_learning.py --corpus runs/fanoutqa/corpus.jsonl --passages 3000 \\
        --work runs/bench_adapt --layers 0,1,2 --rollouts 3 --repeats 2 --out results/adapt_learning/speed.json

The corpus's first `--passages` passages play the user's corpus: `qrag-adapt`'s own phases build its questions and
embed it (kept in `--work`, so a second call embeds nothing). Then, for each repeat and each setting in turn (ABAB,
so a busy machine slows every setting alike), a fresh `Trainer` with `qrag-adapt`'s settings (the `corpus-cpu`
preset from `qrag/hotpotqa-minilm`, the run's horizon) makes one warm-up rollout and update, then `--rollouts`
timed ones. Reported per setting: the median transitions/s and updates/s, the share of the time spent acting, and
the ratio to the first setting. The CPU's flags are recorded with the figures.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def cpu() -> dict[str, Any]:
    """The machine line of the project's benchmarks: the processor and its speed flags (AVX2, AVX-512, bf16, AMX)."""
    from qrag.training.model.precision import speed_flags

    return {"processor": platform.processor() or platform.machine(), "flags": speed_flags()}


def fresh_trainer(adapt: Any, train: list[Any], run: Path, layers: int) -> Any:
    """A `Trainer` with `qrag-adapt`'s settings and `trainer.train_layers` = `layers`, writing to `run`, from the start."""
    from qrag.training.learn.trainer import Trainer

    config = adapt.train_config(run)
    config.trainer.resume, config.trainer.progress = False, False
    config.trainer.train_layers = layers
    return Trainer(config.validate(), train, chunk_cache=adapt.cache)


def subset(corpus: Path, n: int, out: Path) -> Path:
    lines = corpus.read_text(encoding="utf-8").splitlines()[:n]
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.is_file() or out.read_text(encoding="utf-8").splitlines() != lines:
        out.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return out


def learning(args: argparse.Namespace, adapt: Any, train: list[Any], work: Path) -> int:
    """Each SETTING:UPDATES trained from the start for exactly that many updates, then its held-out recall@5 (the
    run's held-out questions, the whole corpus, the model's own search at the run's horizon, its stop threshold
    calibrated on them); the start's beside."""
    import torch

    from qrag.training.learn.adapt.run import held_out_scores

    horizon = int(adapt.record.facts["horizon"])
    rows: dict[str, Any] = {}
    start = held_out_scores(adapt.start, adapt.index, adapt.held_out, [horizon]).recalls[horizon]
    rows["start"] = {"recall@5": statistics.fmean(start), "per_question": start}
    for spec in args.learn.split(","):
        layers, updates = (int(x) for x in spec.split(":"))
        trainer = fresh_trainer(adapt, train, work / f"learn-{layers}-{updates}", layers)
        t0 = time.perf_counter()
        while trainer.updates < updates:
            trainer.update(trainer.collect_rollout())
        seconds = time.perf_counter() - t0
        net = trainer.online.eval()
        with torch.no_grad():
            found = held_out_scores(net, adapt.index, adapt.held_out, [horizon]).recalls[horizon]
        diff = [a - b for a, b in zip(found, start, strict=True)]
        se = statistics.stdev(diff) / len(diff) ** 0.5
        rows[spec] = {"updates": trainer.updates, "transitions": trainer.transitions, "train_seconds": seconds,
                      "recall@5": statistics.fmean(found), "vs_start": statistics.fmean(diff), "vs_start_se": se,
                      "per_question": found}
        print(f"{spec}: {trainer.updates} updates in {seconds:.0f} s, held-out recall@5 {rows[spec]['recall@5']:.3f} "
              f"({rows[spec]['vs_start']:+.3f} ± {1.96 * se:.3f} vs the start)", file=sys.stderr)
        del trainer, net
    out = {"command": " ".join(sys.argv), "cpu": cpu(), "torch": torch.__version__, "threads": args.threads,
           "passages": args.passages, "training_questions": len(train), "held_out_questions": len(adapt.held_out),
           "horizon": horizon, "results": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: {kk: v for kk, v in r.items() if kk != "per_question"} for k, r in rows.items()}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--passages", type=int, default=3000)
    parser.add_argument("--work", default="runs/bench_adapt")
    parser.add_argument("--layers", default="0,1,2", help="comma-separated trainer.train_layers settings (0: all)")
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-questions", type=int, default=1000)
    parser.add_argument("--learn", default="",
                        help="comma-separated SETTING:UPDATES (e.g. 0:24,1:24,1:120): train each from the start for that "
                             "many updates and score held-out recall@5 instead of timing")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch

    from qrag.training.learn.adapt.folder import AdaptOptions
    from qrag.training.learn.adapt.run import Adapt

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    corpus = subset(Path(args.corpus), args.passages, work / "corpus.jsonl")
    adapt = Adapt(AdaptOptions(corpus=str(corpus), out=str(work / "adapt"), minutes=1e6, threads=args.threads,
                               max_questions=args.max_questions))
    adapt.prepare()
    adapt.load()
    train = adapt.training_episodes()
    if args.learn:
        return learning(args, adapt, train, work)
    settings = [int(x) for x in args.layers.split(",")]
    runs: dict[int, list[dict[str, float]]] = {k: [] for k in settings}
    for repeat in range(args.repeats):
        for layers in settings:
            trainer = fresh_trainer(adapt, train, work / f"run-{layers}", layers)
            trainer.update(trainer.collect_rollout())  # warm-up: allocations, tokenizer caches
            acting = update = 0.0
            t0, tr0, up0 = time.perf_counter(), trainer.transitions, trainer.updates
            for _ in range(args.rollouts):
                a = time.perf_counter()
                batch = trainer.collect_rollout()
                b = time.perf_counter()
                trainer.update(batch)
                acting, update = acting + b - a, update + time.perf_counter() - b
            seconds = time.perf_counter() - t0
            row = {"transitions_per_s": (trainer.transitions - tr0) / seconds,
                   "updates_per_s": (trainer.updates - up0) / seconds, "acting_share": acting / seconds,
                   "update_share": update / seconds, "seconds": seconds}
            runs[layers].append(row)
            print(f"repeat {repeat} train_layers={layers}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()),
                  file=sys.stderr)
            del trainer
    first = statistics.median(r["transitions_per_s"] for r in runs[settings[0]])
    summary = {}
    for layers, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        med["ratio_to_first"] = med["transitions_per_s"] / first
        med["transitions_per_minute"] = 60 * med["transitions_per_s"]
        summary[str(layers)] = med
    out = {"command": " ".join(sys.argv), "cpu": cpu(), "torch": torch.__version__, "threads": args.threads,
           "passages": args.passages, "training_questions": len(train), "horizon": adapt.record.facts["horizon"],
           "median": summary, "runs": {str(k): v for k, v in runs.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
