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
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import tyro

from qrag.training.checkpoint import ResumeError
from qrag.training.config import (
    RENAMED_KEYS,
    ConfigError,
    TrainConfig,
    load_preset,
    load_yaml,
    preset_descriptions,
)
from qrag.training.data import EpisodeError
from qrag.training.data.build import build_episodes
from qrag.training.encoders import EncoderLoadError
from qrag.training.qnet import CheckpointError
from qrag.training.validate import one_line


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
    rest = [_renamed_flag(a) for a in rest]
    config = tyro.cli(
        TrainConfig, default=config, args=rest, use_underscores=True, description=__doc__,
        prog="qrag-train",
    )
    if known.resume:
        config.trainer.resume = True
    out = Path(config.trainer.output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"trainer.output_dir {str(out)!r} is a file; pass a folder (it is created if missing).")
    return config.validate()


def _renamed_flag(arg: str) -> str:
    """`--env.max_steps 4` (a renamed key, `RENAMED_KEYS`) still works, with a FutureWarning."""
    flag, sep, value = arg.partition("=")
    for old, new in RENAMED_KEYS.items():
        if flag in (f"--{old}", f"--{old.replace('_', '-')}"):
            warnings.warn(f"{flag} is now --{new}; the old flag will stop working in a later version.",
                          FutureWarning, stacklevel=2)
            return f"--{new}{sep}{value}"
    return arg


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
    except (ConfigError, EpisodeError, EncoderLoadError, CheckpointError, ResumeError, OSError, ValueError) as e:
        print(f"qrag-train: error: {one_line(e)}", file=sys.stderr)
        return 2
    best_eval = read_best_eval(config.trainer.output_dir)  # the trainer scored best/ on `val` when saving it
    if best_eval is not None:
        summary["best_eval"] = best_eval
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
