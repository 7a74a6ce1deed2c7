"""SIGKILL at a random moment of `save_local`, `persist` and `save_pretrained`: is the old or new save intact?

Per save path, `--trials` trials (tests/sigkill.py): save version A, fork a child saving version B over it,
SIGKILL the child after a uniform random delay in [0, 1.2 × the fastest of three saves], then load the folder and
compare a search through it with A's and B's; then save again and count stray temporary folders. Prints a
table and writes JSON. Usage (docs/RESULTS.md):

    python scripts/sigkill_saves.py --trials 20 --out sigkill.json            # all-MiniLM-L6-v2, full weights
    python scripts/sigkill_saves.py --trials 5 --tiny --out sigkill-tiny.json  # a tiny random encoder
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

import torch  # noqa: E402

from qrag.training.model.encoders import bundled_minilm_path  # noqa: E402
from qrag.training.model.qnet import QNetwork  # noqa: E402
from tests import sigkill as sk  # noqa: E402
from tests.conftest import make_tiny_encoder  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="a tiny random BERT instead of all-MiniLM-L6-v2")
    parser.add_argument("--out", type=Path, default=Path("sigkill.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp())
    encoder = str(make_tiny_encoder(tmp / "encoder")) if args.tiny else str(bundled_minilm_path())
    qa = sk.perturbed(QNetwork.from_encoder(encoder), seed=2)  # 'full', both towers, trained: every weight written
    qb = sk.perturbed(qa)
    rows, trials = [], []
    for name, kind in sk.kinds().items():
        a, b = kind.build(qa, sk.TEXTS_A, 2), kind.build(qb, sk.TEXTS_B, 3)
        sig_a, sig_b = kind.memory_signature(a), kind.memory_signature(b)
        assert sig_a != sig_b, "versions A and B must be distinguishable"
        folder = tmp / name
        seconds = sk.save_seconds(kind, a, folder, fastest=True)
        got = [sk.run_trial(kind, a, b, sig_a, sig_b, folder, rng.uniform(0, 1.2 * seconds))
               for _ in range(args.trials)]
        trials += got
        rows.append({
            "save": name, "save_s": round(seconds, 3), "trials": len(got),
            "killed_mid_save": sum(t.outcome == "killed" for t in got),
            "loaded_old": sum(t.loaded == "old" for t in got), "loaded_new": sum(t.loaded == "new" for t in got),
            "mixed": sum(t.loaded == "mixed" for t in got), "unloadable": sum(t.loaded == "unloadable" for t in got),
            "child_failed": sum(t.outcome == "failed" for t in got),
            "stray_after_next_save": sum(t.strays_after_next_save for t in got),
        })
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    machine = {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor() or
               platform.machine(), "encoder": "tiny random BERT" if args.tiny else "all-MiniLM-L6-v2"}
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "machine": machine, "summary": rows,
                                    "trials": [dataclasses.asdict(t) for t in trials],
                                    "finished": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    bad = sum(r["mixed"] + r["unloadable"] + r["stray_after_next_save"] + r["child_failed"] for r in rows)
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
