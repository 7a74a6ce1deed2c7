"""`qrag-blend`: a fine-tune blended with the network it started from, at one or more weights (`qrag.training.model.blend`).

Examples:
    qrag-blend runs/ft --weights 0.5                  # runs/ft/blend-0.5, stop rule calibrated on the run's validation
    qrag-blend runs/ft --weights 0.25,0.5,0.75        # one folder per weight; the table compares them on validation
    qrag-blend runs/ft/best --start qrag/hotpotqa-minilm --weights 0.5 --out blended/   # a checkpoint folder

A run folder (what `qrag-train --init MODEL` wrote: config.yaml and best/) is blended with the network its
config names as model.init; each blend's stop rule is calibrated, and it is scored, on the run's own validation
episodes, as the trainer scores best/ (eval.json beside the model). Choose the weight on validation data of
both domains: the run's (this table) and the start's (e.g. `qrag-eval hotpotqa_pool --tasks val --methods
init,qrag --model runs/ft/blend-0.5`); never on a test split.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qrag.training.input_checks import check_out_path, one_line

RUN_CONFIG = "config.yaml"
RUN_BEST = "best"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="qrag-blend", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tuned", help="a fine-tune's run folder (config.yaml, best/) or a checkpoint folder")
    ap.add_argument("--weights", required=True,
                    help="the fine-tune's share, comma-separated numbers in [0, 1] (0: the start, 1: the fine-tune)")
    ap.add_argument("--start", help="the network it started from (default: the run's or checkpoint's model.init)")
    ap.add_argument("--out", help="folder for the blends, one blend-W/ each (default: the run folder, or beside "
                                  "the checkpoint)")
    ap.add_argument("--batch-size", type=int, default=128, help="texts per encoder pass while scoring")
    ap.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"),
                    help="while scoring: auto is bf16 where the CPU or GPU has it natively, else fp32")
    return ap


def parse_weights(text: str) -> list[float]:
    """'0.25,0.5' → [0.25, 0.5]; each in [0, 1], no repeats."""
    weights: list[float] = []
    for part in text.split(","):
        try:
            w = float(part)
        except ValueError:
            raise ValueError(f"--weights {text!r}: {part.strip()!r} is not a number; pass numbers in [0, 1] "
                             "separated by commas, e.g. 0.25,0.5,0.75.") from None
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"--weights {text!r}: {w:g} is outside [0, 1] (0 is the start, 1 the fine-tune).")
        if w in weights:
            raise ValueError(f"--weights {text!r} names {w:g} twice.")
        weights.append(w)
    return weights


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0 ok, 2 bad arguments or input)."""
    args = _parser().parse_args(argv)
    try:
        weights = parse_weights(args.weights)
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}.")
        given = Path(args.tuned)
        if not given.is_dir():
            raise ValueError(f"{args.tuned!r} is not a folder; pass a fine-tune's run folder (with {RUN_CONFIG} and "
                             f"{RUN_BEST}/) or its checkpoint folder.")
        run = given if (given / RUN_CONFIG).is_file() and (given / RUN_BEST).is_dir() else None
        out = Path(args.out) if args.out else (run if run is not None else given.parent)
        check_out_path(out, "--out", folder=True)
    except ValueError as e:
        print(f"qrag-blend: error: {one_line(e)}", file=sys.stderr)
        return 2
    from qrag.training.data import EpisodeError
    from qrag.training.learn.config import ConfigError, load_yaml
    from qrag.training.model.encoders import EncoderLoadError
    from qrag.training.model.qnet import CheckpointError, QNetwork

    try:
        config = load_yaml(run / RUN_CONFIG) if run is not None else None
        tuned = QNetwork.from_pretrained(run / RUN_BEST if run is not None else given)
        start_name = args.start or tuned.config.init
        if not start_name:
            raise ValueError(f"{args.tuned!r} names no network it started from (model.init is empty: it was not "
                             "trained with --init); pass --start MODEL.")
        start = QNetwork.from_pretrained(start_name)
        rows = blend_all(start, start_name, tuned, weights, out, config, args.batch_size, args.precision)
    except (ConfigError, EpisodeError, EncoderLoadError, CheckpointError, OSError, ValueError) as e:
        print(f"qrag-blend: error: {one_line(e)}", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=1))
    return 0


def blend_all(start: Any, start_name: str, tuned: Any, weights: Sequence[float], out: Path, config: Any,
              batch_size: int = 128, precision: str = "auto") -> list[dict[str, Any]]:
    """Write `out`/blend-W for each weight, recording `start_name` as its model.init (what `qrag-eval`'s `init`
    method loads); with a run's `config`, calibrate and score each on the run's validation episodes."""
    import torch

    from qrag.training.learn.acting import frozen_chunk_cache
    from qrag.training.model.blend import blend_networks
    from qrag.training.model.towers import precision_autocast

    val = _validation(config) if config is not None else []
    if not val:
        print("qrag-blend: no validation episodes (a checkpoint folder, or a run without validation data): the blends' "
              "stop rules are left uncalibrated; blend the run folder (its config.yaml names the validation data) to "
              "calibrate them, or search with an explicit k.", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    store = None  # a frozen chunk tower's vectors, embedded once for every blend
    for w in weights:
        blended = blend_networks(start, tuned, w)
        blended.config = dataclasses.replace(blended.config, init=start_name)
        report: dict[str, Any] = {"weight": w, "start": start_name, "folder": str(out / f"blend-{w:g}")}
        if val:
            store = frozen_chunk_cache(blended, store)
            with precision_autocast(torch.device("cpu"), precision):
                report.update(_score(blended, val, config, batch_size, store))
        extra = {"eval.json": json.dumps(report, indent=1)} if val else None
        blended.save_pretrained(out / f"blend-{w:g}", extra_files=extra)
        rows.append(report)
    return rows


def _validation(config: Any) -> list[Any]:
    """The run's validation episodes, as its trainer built them."""
    from qrag.training.data.build import build_episodes
    from qrag.training.search import pool_neighbours

    return build_episodes(config.data, validation_only=True, neighbours=pool_neighbours)[1]


def _score(qnet: Any, val: Sequence[Any], config: Any, batch_size: int, store: Any) -> dict[str, Any]:
    """The trainer's validation of best/ (greedy hops, fact EM at |SF|) and its stop-rule calibration."""
    from qrag.training.learn.checkpoint_selection import calibrate_stop_rule
    from qrag.training.learn.evaluation import validation_scores

    result = validation_scores(qnet, val, config.env, config.trainer.num_envs * 4, batch_size, store)
    result.update(calibrate_stop_rule(qnet, val, store))
    return result


if __name__ == "__main__":
    raise SystemExit(main())
