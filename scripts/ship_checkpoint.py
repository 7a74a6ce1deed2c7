"""Re-base a trained LoRA checkpoint on the bundled all-MiniLM-L6-v2 and write it where qrag ships checkpoints.

    python scripts/ship_checkpoint.py .gpu/runs/qa15/best babilong-minilm --trained-on .gpu/minilm

A GPU run trains against the carried fp16 copy of MiniLM (`.gpu/minilm`), so its checkpoint names that
folder and that copy's fingerprint. The adapters are moved onto the bundled fp32 encoder (same weights up
to fp16 rounding), the encoder name becomes the bundled alias, and the result is written (atomically) to
`training/checkpoints/NAME`, loadable as `qrag/NAME`. The checkpoint's eval.json is copied beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path

from training.encoders import BUNDLED_MINILM
from training.qnet import QNetwork
from training.shipped import CHECKPOINTS_DIR


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a trained checkpoint folder (train_mode lora or top_layers)")
    parser.add_argument("name", help="shipped name (becomes qrag/NAME)")
    parser.add_argument("--trained-on", default=None, help="where the checkpoint's base encoder is on this machine")
    args = parser.parse_args()
    trained = QNetwork.from_pretrained(args.checkpoint, encoder=args.trained_on)
    if trained.config.train_mode == "full":
        raise SystemExit("a full fine-tune is self-contained and ~180 MB: ship adapters or top layers only.")
    options = {k: v for k, v in dataclasses.asdict(trained.config).items() if k != "encoder"}
    rebased = QNetwork.from_encoder(BUNDLED_MINILM, **options)
    missing, unexpected = rebased.load_state_dict(trained.trainable_state_dict(), strict=False)
    assert not unexpected and not set(missing) & set(rebased.trainable_state_dict()), (missing, unexpected)
    target = CHECKPOINTS_DIR / args.name
    rebased.save_pretrained(target)
    evaluation = Path(args.checkpoint) / "eval.json"
    if evaluation.is_file():
        shutil.copy(evaluation, target / "eval.json")
    print(f"wrote {target} (load it as qrag/{args.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
