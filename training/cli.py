"""`qrag-train`: train a Q-RAG retriever from a preset, a YAML file and command-line flags.

    qrag-train --preset babilong --data.task qa3 --trainer.output_dir runs/qa3
    qrag-train --config my.yaml --resume
    qrag-train --preset cpu-small --data.source jsonl --data.train_path my_qa.jsonl

Layers, later wins: defaults < --preset < --config < flags. Every flag is a config field written
`--section.field` (see `qrag-train --help`).

Entry flags:
    --preset NAME      start from a bundled preset (`--list-presets` lists them with what each is for)
    --config FILE      a YAML file of config sections, applied over the preset
    --resume           continue the run in --trainer.output_dir from its last/ checkpoint
    --list-presets     print the bundled presets with one line each, then exit
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence

import tyro

from qrag.training.checkpoint import ResumeError
from qrag.training.config import (
    ConfigError,
    DataConfig,
    TrainConfig,
    load_preset,
    load_yaml,
    preset_descriptions,
)
from qrag.training.data import SOURCES, Episode, EpisodeError, load_episodes
from qrag.training.encoders import EncoderLoadError
from qrag.training.qnet import CheckpointError

VALIDATION_SEED_OFFSET = 1_000_003  # generated validation sets use a seed disjoint from the training set's
MAX_HELD_OUT_SHARE = 0.2  # a file without --data.val_path lends at most this share of itself to validation


def build_episodes(data: DataConfig) -> tuple[list[Episode], list[Episode]]:
    """Training and validation episodes for a data config (validation is never the test split).

    Generated sources draw validation from the training distribution with a disjoint seed; file
    sources read `val_path`, or hold out `num_val` shuffled episodes of the training file.
    """
    tasks: Sequence[str | None] = [t.strip() for t in data.task.split(",")] if data.task else [None]
    info = SOURCES.get(data.source)
    if info is None:
        raise ConfigError(f"unknown data.source {data.source!r}; valid sources: {', '.join(SOURCES)}.")
    if data.train_path is None and info.needs_path:
        raise ConfigError(f"data.source={data.source!r} reads a file: pass --data.train_path FILE.")
    if (data.train_path is not None or data.val_path is not None) and info.generator:
        files = ", ".join(name for name, s in SOURCES.items() if not s.generator)
        raise ConfigError(
            f"--data.train_path/--data.val_path name a file, but data.source={data.source!r} generates its own "
            f"episodes and would ignore it: pass --data.source jsonl for qrag's JSON Lines (or the file's format: {files})."
        )
    train: list[Episode] = []
    val: list[Episode] = []
    for task in tasks:
        common = {"task": task, "num_sentences": data.num_sentences} if data.train_path is None else {"task": task}
        n_train = max(1, data.num_train // len(tasks)) if data.num_train else None
        train += load_episodes(data.source, split="train", num_samples=n_train, seed=data.seed, path=data.train_path,
                               **common)
        if data.val_path:
            val += load_episodes(data.source, num_samples=data.num_val or None, path=data.val_path, **common)
        elif data.train_path is None:
            val += load_episodes(data.source, split=info.val_split, num_samples=max(1, data.num_val // len(tasks)),
                                 seed=data.seed + VALIDATION_SEED_OFFSET, **common)
    if not data.val_path and data.train_path is not None and data.num_val:
        random.Random(data.seed).shuffle(train)
        if len(train) < 2:
            raise ConfigError(f"{data.train_path!r} has {len(train)} episode(s): training needs at least 2 (one "
                              "held out for validation), or pass --data.val_path.")
        held_out = min(data.num_val, max(1, int(len(train) * MAX_HELD_OUT_SHARE)))
        if held_out < data.num_val:
            print(f"qrag-train: {data.train_path} has {len(train)} episodes; holding out {held_out} for validation "
                  f"(data.num_val={data.num_val} is capped at {MAX_HELD_OUT_SHARE:.0%} of the file; pass "
                  "--data.val_path for a separate validation file).", file=sys.stderr)
        val, train = train[:held_out], train[held_out:]
    return train, val


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """Defaults < --preset < --config < `--section.field` flags."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default=None)
    pre.add_argument("--config", default=None)
    pre.add_argument("--resume", action="store_true")
    pre.add_argument("--list-presets", action="store_true")
    known, rest = pre.parse_known_args(list(argv))
    if known.list_presets:
        described = preset_descriptions()
        width = max(map(len, described), default=0)
        print("\n".join(f"{name:<{width}}  {text}" for name, text in described.items()))
        raise SystemExit(0)
    config = load_preset(known.preset) if known.preset else TrainConfig()
    if known.config:
        config = load_yaml(known.config, base=config)
    config = tyro.cli(
        TrainConfig, default=config, args=rest, use_underscores=True, description=__doc__,
        prog="qrag-train",
    )
    if known.resume:
        config.trainer.resume = True
    return config.validate()


def main(argv: Sequence[str] | None = None) -> int:
    from qrag.training.trainer import Trainer, read_best_eval

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        config = parse_config(args)
        train, val = build_episodes(config.data)
        trainer = Trainer(config, train, val)
        print(f"qrag-train: {len(train)} training / {len(val)} validation episodes, encoder "
              f"{config.model.encoder!r} ({config.model.train_mode}), output {config.trainer.output_dir}")
        summary = trainer.train()
    except (ConfigError, EpisodeError, EncoderLoadError, CheckpointError, ResumeError, FileNotFoundError,
            ValueError) as e:
        print(f"qrag-train: error: {e}", file=sys.stderr)
        return 2
    best_eval = read_best_eval(config.trainer.output_dir)  # the trainer scored best/ on `val` when saving it
    if best_eval is not None:
        summary["best_eval"] = best_eval
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
