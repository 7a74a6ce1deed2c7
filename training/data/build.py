"""Training and validation episodes for a `DataConfig`: what `qrag-train`, the main job and the scripts train on.

    train, val = build_episodes(config.data)

Generated sources (babilong, ruler_niah, ...) give validation episodes from the training distribution with a
disjoint seed (`VALIDATION_SEED_OFFSET`); never the test split. File sources read `data.val_path`, or hold
out `data.num_val` shuffled episodes of the training file, at most `MAX_HELD_OUT_SHARE` of it. With
`data.rehearse`, training episodes of a generated source are mixed in (`rehearsal_episodes`); validation stays the
data's own.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from qrag.training.data.config import DataConfig
from qrag.training.data.episode import Episode
from qrag.training.data.sources import SOURCES, SourceInfo, load_episodes
from qrag.training.overlay import ConfigError

if TYPE_CHECKING:
    from qrag.training.data.negatives import NeighbourSearch

VALIDATION_SEED_OFFSET = 1_000_003  # generated validation sets use a seed disjoint from the training set's
MAX_HELD_OUT_SHARE = 0.2  # a file without --data.val_path lends at most this share of itself to validation


def build_episodes(data: DataConfig, *, validation_only: bool = False,
                   neighbours: NeighbourSearch | None = None) -> tuple[list[Episode], list[Episode]]:
    """Training and validation episodes for a data config (validation is never the test split).

    Generated sources draw validation from their validation split (`SourceInfo.val_split`: the training
    distribution, or the `wiki` source's val pages) with a disjoint seed; file
    sources read `val_path`, or hold out `num_val` shuffled episodes of the training file.

    `validation_only`: the same validation episodes and no training ones (the first list is empty); the training
    file is read only where validation is held out of it, and rehearsal, which adds training episodes, is not built.
    `neighbours` finds the hard negatives of `num_distractors` (`qrag.training.search.pool_neighbours`; the
    sources that draw them need it).
    """
    if data.rehearse is not None:
        rehearsed_source(data)  # checked before any episode is built
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
    holds_out = not data.val_path and data.train_path is not None and bool(data.num_val)
    train: list[Episode] = []
    val: list[Episode] = []
    for task in tasks:
        common: dict[str, Any] = ({"task": task, "num_sentences": data.num_sentences} if data.train_path is None
                                  else {"task": task})
        if data.num_distractors is not None:
            common["num_distractors"] = data.num_distractors
            if "neighbours" in info.options:
                common["neighbours"] = neighbours
        if data.corpus is not None:
            common["corpus"] = data.corpus
        if data.filler_sentences is not None:
            common["filler_sentences"] = data.filler_sentences
        if data.confusers:
            common["confusers"] = data.confusers
        n_train = max(1, data.num_train // len(tasks)) if data.num_train else None
        if holds_out or not validation_only:
            train += load_episodes(data.source, split="train", num_samples=n_train, seed=data.seed,
                                   path=data.train_path, **common)
        if data.val_path:
            val += load_episodes(data.source, num_samples=data.num_val or None, path=data.val_path, **common)
        elif data.train_path is None:
            val += load_episodes(data.source, split=info.val_split, num_samples=max(1, data.num_val // len(tasks)),
                                 seed=data.seed + VALIDATION_SEED_OFFSET, **common)
    if holds_out:
        random.Random(data.seed).shuffle(train)
        if len(train) < 2:
            raise ConfigError(f"{data.train_path!r} has {len(train)} episode(s): training needs at least 2 (one "
                              "held out for validation), or pass --data.val_path.")
        held_out = min(data.num_val, max(1, int(len(train) * MAX_HELD_OUT_SHARE)))
        if held_out < data.num_val:
            print(f"qrag-train: {data.train_path} has {len(train)} episodes; holding out {held_out} for validation, "
                  f"not --data.num_val={data.num_val}: a file lends at most {MAX_HELD_OUT_SHARE:.0%} of itself. Pass "
                  f"--data.num_val {held_out} or less to hold out what you ask, or --data.val_path FILE for a "
                  "validation file of its own.", file=sys.stderr)
        val, train = train[:held_out], train[held_out:]
    if validation_only:
        return [], val
    if data.rehearse:
        train += rehearsal_episodes(data, len(train), neighbours)
    return train, val


def rehearsal_episodes(data: DataConfig, own: int, neighbours: NeighbourSearch | None = None) -> list[Episode]:
    """Training episodes of the generated source `data.rehearse` (`NAME` or `NAME:TASK`), as many as make them
    `data.rehearse_share` of a training set that holds `own` episodes of its own (at least one).

    A fine-tune that sees only a team's questions drifts from what its starting model did well; replaying that
    model's own training distribution beside them (rehearsal, as in continual learning) holds it there.

    Raises:
        ConfigError: `data.rehearse` is not a generated source, or its task is missing or unknown.
    """
    name, task, info = rehearsed_source(data)
    count = max(1, round(own * data.rehearse_share / (1 - data.rehearse_share)))
    options: dict[str, Any] = {}
    if data.num_distractors is not None and "num_distractors" in info.options:
        options["num_distractors"] = data.num_distractors
        if "neighbours" in info.options:
            options["neighbours"] = neighbours
    if data.num_sentences is not None:
        options["num_sentences"] = data.num_sentences
    return load_episodes(name, task=task, split="train", num_samples=count, seed=data.seed, **options)


def rehearsed_source(data: DataConfig) -> tuple[str, str | None, SourceInfo]:
    """`data.rehearse` as (source name, task or None, the source), checked (`TrainConfig.validate` and
    `build_episodes` call it first, so a bad value is refused before any data is read).

    Raises:
        ConfigError: not a generated source, or its task is missing or unknown.
    """
    assert data.rehearse is not None
    name, _, task = data.rehearse.partition(":")
    info = SOURCES.get(name)
    if info is None or not info.generator:
        generated = ", ".join(n for n, s in SOURCES.items() if s.generator)
        raise ConfigError(f"data.rehearse {data.rehearse!r} is not a generated source; pass one of {generated} "
                          "(NAME, or NAME:TASK where the source has tasks).")
    if info.tasks is not None and task not in info.tasks:
        raise ConfigError(f"data.rehearse {data.rehearse!r} needs one of {name}'s tasks: "
                          f"{', '.join(f'{name}:{t}' for t in info.tasks)}.")
    if info.tasks is None and task:
        raise ConfigError(f"data.rehearse {data.rehearse!r}: the {name} source has no tasks; pass {name!r}.")
    return name, task or None, info
