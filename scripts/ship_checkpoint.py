"""Write a trained checkpoint where qrag ships checkpoints, as adapters beside the bundled all-MiniLM-L6-v2.

    python scripts/ship_checkpoint.py runs/gpu/qa15/best babilong-minilm
    python scripts/ship_checkpoint.py runs/demo30/train/best babilong-minilm-cpu --rank 32
    python scripts/ship_checkpoint.py runs/hp-q/best hotpotqa-minilm --rank 32 --fill question --stop-threshold 0.425
    python scripts/ship_checkpoint.py runs/hp-q/best hotpotqa-minilm --rank 32 --fill question_unguarded \
        --lexical-weight 0.2
    python scripts/ship_checkpoint.py runs/hp-top1/best hotpotqa-minilm-top1 --top-layers 1 --settings-of qrag/hotpotqa-minilm

A LoRA or top-layers checkpoint is re-based: the trained part is moved onto the bundled fp32 encoder and the
encoder name becomes the bundled alias. `--trained-on DIR` loads a checkpoint whose base encoder is not where
the checkpoint says (`qrag/babilong-minilm` was trained against an fp16-stored copy of MiniLM in a folder of
its own: `--trained-on` that folder; same weights up to fp16 rounding). A full fine-tune (the CPU main job trains the whole state tower, ~87 MB) is re-expressed as rank
`--rank` LoRA adapters of its weight changes (`qrag.training.model.compress.low_rank_adapters`); evaluate the result
(`qrag-eval babilong --model qrag/NAME`) against the full model before relying on it.

A full fine-tune of the top layers alone (`trainer.train_layers N`: every layer below them is still the base's, which
is checked) ships exactly with `--top-layers N`: those N layers' weights as they trained (`train_mode` 'top_layers'),
nothing re-expressed. `--settings-of MODEL` saves that model's search (hop settings) with it.

`--state-passage-tokens N` saves how much of each passage a later hop's state reads (chosen on validation data, e.g.
by experiments/top_layers.py).

`--fill question --stop-threshold T` saves the off-domain guard as the model's search default (docs/METHOD.md
§4.4; T chosen on validation data, e.g. by experiments/hop_guard.py); `--lexical-weight W` saves the weight of
lexical evidence at every hop (§4.5; chosen on validation data, e.g. by experiments/lexical_levers.py); otherwise
the checkpoint's own hop settings travel with it.

The result is written (atomically) to `training/model/checkpoints/NAME`, loadable as `qrag/NAME`; the checkpoint's
eval.json is copied beside it. The model card (MODEL_CARD.md) and scores.json are written by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path

import torch

from qrag.training.model.compress import low_rank_adapters
from qrag.training.model.encoders import BUNDLED_MINILM
from qrag.training.model.qnet import QNetwork
from qrag.training.model.shipped import CHECKPOINTS_DIR, resolve_checkpoint
from qrag.training.overlay import ConfigError
from qrag.training.search.settings import FILLS


def rebase(trained: QNetwork) -> QNetwork:
    """The trained part of an adapter / top-layers checkpoint on the bundled encoder."""
    rebased = QNetwork.from_config(dataclasses.replace(trained.config, encoder=BUNDLED_MINILM))
    missing, unexpected = rebased.load_state_dict(trained.trainable_state_dict(), strict=False)
    assert not unexpected and not set(missing) & set(rebased.trainable_state_dict()), (missing, unexpected)
    rebased.hop_settings = trained.hop_settings
    return rebased


def top_layers(trained: QNetwork, n: int) -> QNetwork:
    """A full fine-tune whose state tower trained only its top `n` layers, as a 'top_layers' checkpoint on the bundled
    encoder holding exactly those layers' weights.

    Raises:
        ValueError: a weight below the top `n` layers differs from the bundled encoder's (it trained there too).
    """
    shipped = QNetwork.from_config(dataclasses.replace(trained.config, encoder=BUNDLED_MINILM, train_mode="top_layers",
                                                       trainable_layers=n))
    kept = shipped.trainable_state_dict()
    trained_state = trained.state_dict()
    for key, value in shipped.state_dict().items():
        if key not in kept and key.startswith("state_tower.") and not torch.equal(trained_state[key], value):
            raise ValueError(f"{key} differs from the bundled encoder's: more than the top {n} layers trained")
    missing, unexpected = shipped.load_state_dict({k: trained_state[k] for k in kept}, strict=False)
    assert not unexpected and not set(missing) & set(kept), (missing, unexpected)
    shipped.hop_settings = trained.hop_settings
    return shipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a trained checkpoint folder")
    parser.add_argument("name", help="shipped name (becomes qrag/NAME)")
    parser.add_argument("--trained-on", default=None, help="where the checkpoint's base encoder is on this machine")
    parser.add_argument("--rank", type=int, default=None, help="adapter rank for a full fine-tune (required for one, "
                        "unless --top-layers)")
    parser.add_argument("--top-layers", type=int, default=None,
                        help="a full fine-tune of the top N layers alone: ship those layers exactly")
    parser.add_argument("--settings-of", default=None, help="save this model's search (hop settings) with it")
    parser.add_argument("--state-passage-tokens", type=int, default=None,
                        help="tokens a state keeps of each passage (model.max_state_passage_tokens), chosen on validation")
    parser.add_argument("--fill", choices=FILLS, default=None, help="the search fill saved with the model "
                        "('question': the off-domain guard); default: the checkpoint's")
    parser.add_argument("--stop-threshold", type=float, default=None,
                        help="the stop threshold saved with the model (the guard's, with --fill question)")
    parser.add_argument("--lexical-weight", type=float, default=None,
                        help="the weight of lexical evidence at every hop saved with the model (0: Q alone)")
    args = parser.parse_args()
    trained = QNetwork.from_pretrained(args.checkpoint, encoder=args.trained_on)
    if trained.config.train_mode == "full" and args.top_layers is not None:
        try:
            shipped = top_layers(trained, args.top_layers)
        except ValueError as e:
            parser.error(f"--top-layers {args.top_layers}: {e}")
    elif trained.config.train_mode == "full":
        if args.rank is None:
            parser.error(f"{args.checkpoint} is a full fine-tune (~87 MB per tower): pass --rank (e.g. 32) to ship "
                         "it as low-rank adapters.")
        try:
            shipped, report = low_rank_adapters(trained, args.rank, base=BUNDLED_MINILM)
        except ValueError as e:
            parser.error(f"--rank {args.rank}: {e}")
        print(f"rank {report.rank} adapters on {report.matrices} weight matrices ({report.adapter_parameters:,} "
              f"parameters): least energy kept {report.min_energy_kept:.3f}, change reset to the base "
              f"{report.dropped_fraction:.3f} of the fine-tune's norm")
    else:
        if args.rank is not None:
            parser.error(f"--rank applies to full fine-tunes; {args.checkpoint} is train_mode "
                         f"{trained.config.train_mode!r} and ships as it is.")
        shipped = rebase(trained)
    if args.settings_of is not None:
        shipped.hop_settings = dataclasses.replace(QNetwork.from_pretrained(resolve_checkpoint(args.settings_of)).hop_settings)
    if args.state_passage_tokens is not None:
        shipped.config = dataclasses.replace(shipped.config, max_state_passage_tokens=args.state_passage_tokens)
        try:
            shipped.config.validate()
        except ConfigError as e:
            parser.error(str(e))
    settings = shipped.hop_settings
    try:
        shipped.hop_settings = dataclasses.replace(
            settings, fill=settings.fill if args.fill is None else args.fill,
            stop_threshold=settings.stop_threshold if args.stop_threshold is None else args.stop_threshold,
            lexical_weight=settings.lexical_weight if args.lexical_weight is None else args.lexical_weight,
        ).validate()
    except ConfigError as e:
        parser.error(str(e))
    target = CHECKPOINTS_DIR / args.name
    shipped.save_pretrained(target)
    evaluation = Path(args.checkpoint) / "eval.json"
    if evaluation.is_file():
        shutil.copy(evaluation, target / "eval.json")
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    print(f"wrote {target} ({size / 2**20:.1f} MB; load it as qrag/{args.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
