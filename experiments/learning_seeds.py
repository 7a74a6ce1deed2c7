"""The end-to-end learning test's run (tests/training/learn/test_learning.py) for several trainer seeds and a scale.

Prints, per seed, greedy fact EM on the 200 held-out two-hop episodes before and after training, fact recall
after, and the wall time. Usage: `python experiments/learning_seeds.py --scale 1 0 1 2 3` (experiments/NOTEBOOK.md, "Learning test").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from qrag.training.learn.evaluation import evaluate  # noqa: E402
from qrag.training.learn.trainer import Trainer  # noqa: E402
from qrag.training.model.qnet import QNetwork  # noqa: E402
from tests.conftest import make_tiny_encoder  # noqa: E402
from tests.training.learn.two_hop import learning_config, make_two_hop_episodes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("seeds", type=int, nargs="+")
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    encoder = make_tiny_encoder(tmp / "encoder", hidden=64, layers=2, seed=0)
    train, val, test = (make_two_hop_episodes(n, seed=s) for n, s in ((2000, 0), (100, 1), (200, 2)))
    print("seed  scale  untrained_fact_em  trained_fact_em  trained_fact_recall  seconds")
    for seed in args.seeds:
        started = time.perf_counter()
        cfg = learning_config(str(encoder), str(tmp / f"run{seed}"), seed=seed, scale=args.scale)
        qnet = QNetwork.from_config(cfg.model)
        before = evaluate(qnet, test, cfg.env)
        Trainer(cfg, train, val, qnet=qnet).train()
        after = evaluate(QNetwork.from_pretrained(tmp / f"run{seed}" / "best"), test, cfg.env)
        print(f"{seed:4d}  {args.scale:5g}  {before['fact_em']:17.3f}  {after['fact_em']:15.3f}  "
              f"{after['fact_recall']:19.3f}  {time.perf_counter() - started:7.0f}", flush=True)


if __name__ == "__main__":
    main()
