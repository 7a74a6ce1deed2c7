"""Calibrate a checkpoint's stop rule on its own validation data and store it with the checkpoint.

    python scripts/calibrate_checkpoint.py runs/wiki-cpu/best --source wiki --task mix --num 200
    python scripts/calibrate_checkpoint.py qrag/babilong-minilm-cpu --preset babilong-cpu

Runs `qrag.training.learn.stop_calibration.calibrate_stop_threshold` (greedy hops up to the model's `hops.max_hops` on
validation episodes: generated sources use their validation split, e.g. the `wiki` source's `val` pages, or
the training split under the trainer's disjoint validation seed, never the test split; `--preset` takes exactly
the validation episodes a run of that preset validates on) and writes the chosen threshold into the `hops` section of the checkpoint's
qrag_config.json (only that section changes; the file is replaced atomically). Prints the calibration
report and writes it as calibration.json beside the checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from qrag.training.data import SOURCES, load_episodes
from qrag.training.data.build import VALIDATION_SEED_OFFSET, build_episodes
from qrag.training.learn.config import load_preset
from qrag.training.learn.stop_calibration import calibrate_stop_threshold
from qrag.training.model.qnet import CONFIG_FILE, QNetwork
from qrag.training.model.shipped import resolve_checkpoint
from qrag.training.search import pool_neighbours
from qrag.training.search.chunk_vectors import ChunkVectorCache


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a checkpoint folder (or shipped name)")
    parser.add_argument("--preset", default=None, help="calibrate on this preset's validation episodes")
    parser.add_argument("--source", default=None, help="a generated data source, e.g. wiki")
    parser.add_argument("--task", default=None)
    parser.add_argument("--num", type=int, default=200, help="validation episodes (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if (args.preset is None) == (args.source is None):
        parser.error("give one of --preset (its validation episodes) or --source.")
    if args.num < 1:
        parser.error(f"--num must be >= 1, got {args.num}.")
    folder = resolve_checkpoint(args.checkpoint)
    model = QNetwork.from_pretrained(folder)
    if args.preset is not None:
        data = load_preset(args.preset).data
        episodes = build_episodes(data, validation_only=True, neighbours=pool_neighbours)[1]
        args.source, args.task, split, seed = data.source, data.task, "validation of the preset", data.seed
    else:
        info = SOURCES.get(args.source)
        if info is None or not info.generator:
            parser.error(f"--source {args.source!r} must be a generated source "
                         f"({', '.join(n for n, s in SOURCES.items() if s.generator)}).")
        split = info.val_split
        # A source without a split of its own validates on its training split under a disjoint seed, as the
        # trainer does: never on the episodes a run trains on.
        seed = args.seed + (VALIDATION_SEED_OFFSET if split == "train" else 0)
        episodes = load_episodes(args.source, task=args.task, split=split, num_samples=args.num, seed=seed)
    # A frozen chunk tower embeds each distinct passage once, however many episodes share it.
    store = ChunkVectorCache(model.chunk_vectors_key()) if model.chunk_tower_frozen else None
    result = calibrate_stop_threshold(model, episodes, store=store)
    report = {**dataclasses.asdict(result), "source": args.source, "task": args.task, "split": split, "seed": seed,
              "preset": args.preset}
    print(json.dumps(report, indent=1))
    head_path = folder / CONFIG_FILE
    head = json.loads(head_path.read_text(encoding="utf-8"))
    head["hops"] = dataclasses.asdict(dataclasses.replace(model.hop_settings, stop_threshold=result.threshold, calibrated=True))
    tmp = head_path.with_name(head_path.name + ".tmp")
    tmp.write_text(json.dumps(head, indent=2), encoding="utf-8")
    tmp.replace(head_path)
    (folder / "calibration.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"stored stop_threshold={result.threshold:.4f} in {head_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
