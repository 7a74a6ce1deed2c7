"""Calibrate a checkpoint's stop rule on its own validation data and store it with the checkpoint.

    python scripts/calibrate_checkpoint.py runs/wiki-cpu/best --source wiki --task mix --num 200

Runs `qrag.training.calibrate.calibrate_stop_threshold` (greedy hops up to the model's `hops.max_hops` on
validation episodes: generated sources use their validation split, e.g. the `wiki` source's `val` pages,
never the test split) and writes the chosen threshold into the `hops` section of the checkpoint's
qrag_config.json (only that section changes; the file is replaced atomically). Prints the calibration
report and writes it as calibration.json beside the checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from qrag.training.calibrate import calibrate_stop_threshold
from qrag.training.chunk_vectors import ChunkVectorCache
from qrag.training.data import SOURCES, load_episodes
from qrag.training.qnet import CONFIG_FILE, QNetwork
from qrag.training.shipped import resolve_checkpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a checkpoint folder (or shipped name)")
    parser.add_argument("--source", required=True, help="a generated data source, e.g. wiki")
    parser.add_argument("--task", default=None)
    parser.add_argument("--num", type=int, default=200, help="validation episodes (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    info = SOURCES.get(args.source)
    if info is None or not info.generator:
        parser.error(f"--source {args.source!r} must be a generated source ({', '.join(n for n, s in SOURCES.items() if s.generator)}).")
    if args.num < 1:
        parser.error(f"--num must be >= 1, got {args.num}.")
    folder = resolve_checkpoint(args.checkpoint)
    model = QNetwork.from_pretrained(folder)
    episodes = load_episodes(args.source, task=args.task, split=info.val_split, num_samples=args.num, seed=args.seed)
    # A frozen chunk tower embeds each distinct passage once, however many episodes share it.
    store = ChunkVectorCache(model.chunk_vectors_key()) if model.chunk_tower_frozen else None
    result = calibrate_stop_threshold(model, episodes, store=store)
    report = {**dataclasses.asdict(result), "source": args.source, "task": args.task, "split": info.val_split,
              "seed": args.seed}
    print(json.dumps(report, indent=1))
    head_path = folder / CONFIG_FILE
    head = json.loads(head_path.read_text(encoding="utf-8"))
    head["hops"] = dataclasses.asdict(dataclasses.replace(model.hops, stop_threshold=result.threshold, calibrated=True))
    tmp = head_path.with_name(head_path.name + ".tmp")
    tmp.write_text(json.dumps(head, indent=2), encoding="utf-8")
    tmp.replace(head_path)
    (folder / "calibration.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"stored stop_threshold={result.threshold:.4f} in {head_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
