"""`qrag-train`: train a Q-RAG retriever from a preset, a YAML file and command-line flags.

    qrag-train --preset babilong --data.task qa3 --trainer.output_dir runs/qa3
    qrag-train --config my.yaml --resume
    qrag-train --preset cpu-small --data.source jsonl --data.train_path my_qa.jsonl
    qrag-train --init qrag/hotpotqa-minilm --preset corpus-cpu --data.corpus docs/ --data.train_path qa.jsonl

Layers, later wins: defaults < --preset < --config < --init < flags. Every flag is a config field written
`--section.field` (see `qrag-train --help`).

Entry flags:
    --preset NAME      start from a bundled preset (`--list-presets` lists them with what each is for)
    --config FILE      a YAML file of config sections, applied over the preset
    --init MODEL       fine-tune a trained Q-network (a shipped qrag/NAME or a checkpoint folder) instead of the bare
                       encoder: its model section (encoder, positions, truncation, trained part) and its horizon
                       (env.max_hops) replace the preset's; its search settings (guard, lexical weight) travel with it
    --resume           continue the run in --trainer.output_dir from its last/ checkpoint
    --list-presets     print the bundled presets with one line each, then exit
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import tyro

from qrag.training.data import EpisodeError
from qrag.training.input_checks import one_line
from qrag.training.learn.config import (
    RENAMED_KEYS,
    ConfigError,
    ModelConfig,
    TrainConfig,
    init_model,
    load_preset,
    load_yaml,
    preset_descriptions,
    takes_train_layers,
)

# The model libraries (torch, transformers) load once the flags are parsed: --help and a bad flag answer at once.


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """Defaults < --preset < --config < `--section.field` flags."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default=None)
    pre.add_argument("--config", default=None)
    pre.add_argument("--resume", action="store_true")
    pre.add_argument("--list-presets", action="store_true")
    pre.add_argument("--init", "--model.init", dest="init", default=None)
    known, rest = pre.parse_known_args(list(argv))
    if known.list_presets:
        described = preset_descriptions()
        width = max(map(len, described), default=0)
        print("\n".join(f"{name:<{width}}  {text}" for name, text in described.items()))
        raise SystemExit(0)
    config = load_preset(known.preset) if known.preset else TrainConfig()
    if known.config:
        config = load_yaml(known.config, base=config)
    init = known.init or config.model.init
    start = init_model(init) if init else None
    if start is not None:
        config.model, config.env.max_hops = start
        if config.trainer.train_layers and not takes_train_layers(config.model):  # a preset's default, not a flag
            print(f"qrag-train: the --init model trains every layer (its state tower cannot train its top layers "
                  f"alone: train_towers {config.model.train_towers!r}, train_mode {config.model.train_mode!r}, "
                  f"state_anchor {config.model.state_anchor!r}).", file=sys.stderr)
            config.trainer.train_layers = 0
    rest = [_renamed_flag(a) for a in rest]
    config = tyro.cli(
        TrainConfig, default=config, args=rest, use_underscores=True, description=__doc__,
        prog="qrag-train",
    )
    if start is not None:
        _check_init(config, start[0])
    if known.resume:
        config.trainer.resume = True
    out = Path(config.trainer.output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"trainer.output_dir {str(out)!r} is a file; pass a folder (it is created if missing).")
    return config.validate()


def _check_init(config: TrainConfig, start: ModelConfig) -> None:
    """A fine-tune keeps the network it starts from: every model field a flag or file set must agree with it."""
    for f in dataclasses.fields(ModelConfig):
        mine, theirs = getattr(config.model, f.name), getattr(start, f.name)
        if mine != theirs:
            raise ConfigError(f"--model.{f.name} {mine!r} differs from the --init model's {theirs!r} ({start.init}): a "
                              "fine-tune keeps the network it starts from; drop the setting, or train from the bare "
                              "encoder without --init.")


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
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        config = parse_config(args)
    except (ConfigError, EpisodeError, OSError, ValueError) as e:
        print(f"qrag-train: error: {one_line(e)}", file=sys.stderr)
        return 2
    from qrag.training.data.build import build_episodes
    from qrag.training.learn.checkpoint_files import ResumeError
    from qrag.training.learn.trainer import Trainer, read_best_eval
    from qrag.training.model.encoders import EncoderLoadError
    from qrag.training.model.qnet import CheckpointError
    from qrag.training.search import pool_neighbours

    try:
        train, val = build_episodes(config.data, neighbours=pool_neighbours)
        trainer = Trainer(config, train, val)
        rehearsing = (f" ({config.data.rehearse_share:.0%} of them {config.data.rehearse}'s)" if config.data.rehearse
                      else "")
        print(f"qrag-train: {len(train)} training{rehearsing} / {len(val)} validation episodes, encoder "
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
