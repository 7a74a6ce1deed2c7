"""Which learning rate (and which layers trained) makes `qrag-adapt`'s fine-tune learn fastest? Its training phase re-run.

A finished `qrag-adapt` folder holds everything its training phase reads (the question files, the corpus's vectors,
the record of the phases before); this copies those into OUT and runs that phase again at `--lr` (and
`--train-layers`: the top layers trained on a frozen trunk, 0 for every layer), for `--transitions` transitions, so
two settings are read on the same held-out built questions at the same number of transitions. The phase trains without
validation episodes, as `qrag-adapt`'s does (its choice scores afterwards): `adapt_checkpoints.py` scores OUT's
`work/run/last/model` over the whole corpus as the choice would; this prints the training episodes' fact recall as the
trainer logged it. (The readings of 2026-11-27 in results/HISTORY.md came from the trainer's own validation, which the
phase ran then.) Validation data only: the questions are the run's own.

    python experiments/adapt_learning_rate.py runs/adapt runs/lr-3e-4 --lr 3e-4 --transitions 1024
    python experiments/adapt_learning_rate.py runs/adapt_long runs/every-layer --train-layers 0 --transitions 4096
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from qrag.training.learn.adapt import run as adapt
from qrag.training.learn.adapt.folder import AdaptOptions
from qrag.training.learn.config import load_preset

KEPT = ("train.jsonl", "val.jsonl", "vectors")
"""What the phases after the set-up read of a finished run's work folder (besides its record)."""


def reopen(run: Path, out: Path, threads: int, redo: Sequence[str] = ()) -> adapt.Adapt:
    """A finished `qrag-adapt` run (folder `run`, not written) copied into the new folder `out` and loaded: its work files
    and its record, with the phases `redo` taken out of the record so they can run again."""
    if out.exists():
        raise SystemExit(f"{out} exists: give a new folder.")
    record = json.loads((run / "work" / "adapt.json").read_text(encoding="utf-8"))
    for phase in redo:
        record["seconds"].pop(phase, None)
    (out / "work").mkdir(parents=True)
    for name in KEPT:
        src, dst = run / "work" / name, out / "work" / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    (out / "work" / "adapt.json").write_text(json.dumps(record), encoding="utf-8")
    req = record["request"]
    opened = adapt.Adapt(AdaptOptions(corpus=req["corpus"], out=str(out), init=req["init"], seed=req["seed"],
                                      threads=threads, minutes=600, max_questions=req["max_questions"]))
    opened.prepare()
    opened.load()  # every phase before `redo` is done: this reads what they wrote
    return opened


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a finished qrag-adapt --out folder")
    p.add_argument("out", type=Path, help="a new folder for the re-run")
    p.add_argument("--lr", type=float, default=adapt.LEARNING_RATE)
    p.add_argument("--train-layers", type=int, default=None, help="trainer.train_layers (default: the preset's)")
    p.add_argument("--transitions", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    run = reopen(a.run, a.out, a.threads, redo=("train", "choose", "report"))

    def preset(name: str):  # type: ignore[no-untyped-def]
        config = load_preset(name)
        config.trainer.total_transitions = a.transitions
        if a.train_layers is not None:
            config.trainer.train_layers = a.train_layers
        return config

    adapt.load_preset = preset  # type: ignore[assignment]
    adapt.LEARNING_RATE = a.lr  # the phase sets the preset's rate to it
    run._train()
    readings = [json.loads(line) for line in (a.out / "work" / "run" / "metrics.jsonl").read_text().splitlines()]
    for r in readings:
        if "charts/fact_recall" in r:
            print(f"lr {a.lr:g}, train_layers {a.train_layers}: {r['transitions']} transitions, {r['charts/updates']} "
                  f"updates, training episodes' fact recall {r['charts/fact_recall']:.3f}")
    print(f"score it: python experiments/adapt_checkpoints.py {a.run} {a.out}/work/run/last/model --work WORK --out OUT.json")


if __name__ == "__main__":
    main()
