"""A fine-tune blended with the network it started from, in weight space: θ = (1 − w)·θ_start + w·θ_tuned.

A fine-tune on a few hundred questions of one corpus gains there and loses part of what its start knew
(results/HISTORY.md, "2026-11-27: own corpus and questions, by hand", a recipe since withdrawn). Weight-space
ensembling (WiSE-FT; Wortsman et al., 2022, "Robust fine-tuning of zero-shot models") keeps most of both: the two
networks share their start, so the points between them stay good networks, and the weight `w` is chosen on
validation data of both domains (docs/METHOD.md §3.9).

    >>> start, tuned = QNetwork.from_pretrained("qrag/hotpotqa-minilm"), QNetwork.from_pretrained("runs/ft/best")  # doctest: +SKIP
    >>> blend_networks(start, tuned, 0.5).save_pretrained("runs/ft/blend-0.5")  # doctest: +SKIP

For LoRA networks the blend is exact, not a blend of the factors: each adapted weight is
W₀ + (1 − w)·s₀B₀A₀ + w·s₁B₁A₁ (s = lora_alpha / lora_rank), which is again a LoRA adapter, of rank
r₀ + r₁: B = [c₀B₀ | c₁B₁], A = [c₀A₀ ; c₁A₁] with c₀ = √((1 − w)·s₀/s), c₁ = √(w·s₁/s) and s the blend's
own scale. Every other trained parameter (a 'full' or 'top_layers' fine-tune) is blended linearly.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import cast

import torch
from peft.tuners.lora import LoraLayer
from torch import nn

from qrag.training.model.config import ModelConfig
from qrag.training.model.qnet import QNetwork

SHARED_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig)
                      if f.name not in ("encoder", "init", "lora_rank", "lora_alpha", "lora_dropout"))
"""What two networks must agree on to be blended: all but their lineage and their adapters' size (the encoder may
be named differently, a hub id or a local copy: its weights' fingerprint must agree)."""


@torch.no_grad()
def blend_networks(start: QNetwork, tuned: QNetwork, weight: float) -> QNetwork:
    """The network (1 − `weight`)·`start` + `weight`·`tuned`, exactly, with `tuned`'s hop settings.

    The stop threshold `tuned` calibrated is kept but marked uncalibrated: the blend's Q-values are its own,
    so calibrate again on validation data (`qrag.training.learn.checkpoint_selection.calibrate_stop_rule`; `qrag-blend` does).

    Args:
        start: The network the fine-tune began from (`qrag-train --init`).
        tuned: The fine-tune.
        weight: Share of the fine-tune, in [0, 1] (0: `start`'s weights, 1: `tuned`'s).

    Raises:
        ValueError: `weight` outside [0, 1], or the two networks differ in anything but their adapters' size
            (another encoder, base weights, train mode, towers, positions, ...).
    """
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0.0 <= weight <= 1.0:
        raise ValueError(f"the blend's weight must be a number in [0, 1] (the fine-tune's share), got {weight!r}.")
    _check_compatible(start, tuned)
    w = float(weight)
    if start.config.train_mode != "lora":
        blended = _linear_blend(start, tuned, w)
    else:
        blended = _lora_blend(start, tuned, w)
    blended.hop_settings = dataclasses.replace(tuned.hop_settings, calibrated=False)
    return blended.eval()


def _check_compatible(start: QNetwork, tuned: QNetwork) -> None:
    if start._adapters is not None or tuned._adapters is not None:
        raise ValueError("cannot blend a network whose adapters are merged for serving (merge_adapters, load_model): "
                         "load both with QNetwork.from_pretrained.")
    for name in SHARED_FIELDS:
        a, b = getattr(start.config, name), getattr(tuned.config, name)
        if a != b:
            raise ValueError(f"cannot blend networks that differ in model.{name} ({a!r} against {b!r}): blend a "
                             "fine-tune with the network it started from (its model.init).")
    if start.base_fingerprint() != tuned.base_fingerprint():
        raise ValueError("cannot blend networks trained on different base encoder weights (their fingerprints "
                         f"{start.base_fingerprint()} and {tuned.base_fingerprint()} differ).")


def _linear_blend(start: QNetwork, tuned: QNetwork, w: float) -> QNetwork:
    blended = copy.deepcopy(tuned)
    ours, theirs = blended.state_dict(), start.state_dict()
    for key, value in ours.items():
        if value.is_floating_point():
            value.copy_(torch.lerp(theirs[key].to(value.dtype), value, w))
    blended._untrained_sums = None
    return blended


def _lora_blend(start: QNetwork, tuned: QNetwork, w: float) -> QNetwork:
    config = dataclasses.replace(
        tuned.config, lora_rank=start.config.lora_rank + tuned.config.lora_rank,
        lora_alpha=float(start.config.lora_alpha + tuned.config.lora_alpha), lora_dropout=0.0,
    )
    blended = QNetwork.from_config(config)
    towers = [(start.state_tower, tuned.state_tower, blended.state_tower)]
    if not blended.chunk_tower_frozen:
        towers.append((start.chunk_tower, tuned.chunk_tower, blended.chunk_tower))
    for source0, source1, target in towers:
        layers0, layers1 = _lora_layers(source0.encoder), _lora_layers(source1.encoder)
        for name, layer in _lora_layers(target.encoder).items():
            _concatenate(layer, [(layers0[name], 1.0 - w), (layers1[name], w)])
        # Anything trained beside the adapters (none with PEFT's defaults) is blended linearly.
        extra0 = {n: p for n, p in source0.encoder.named_parameters() if p.requires_grad and "lora_" not in n}
        extra1 = {n: p for n, p in source1.encoder.named_parameters() if p.requires_grad and "lora_" not in n}
        for n, p in target.encoder.named_parameters():
            if n in extra1:
                p.copy_(torch.lerp(extra0[n], extra1[n], w))
    return blended


def _lora_layers(encoder: nn.Module) -> dict[str, LoraLayer]:
    return {name: module for name, module in encoder.named_modules() if isinstance(module, LoraLayer)}


def _concatenate(target: LoraLayer, parts: list[tuple[LoraLayer, float]]) -> None:
    """Set `target`'s adapter to Σ share·(its scale·B·A) over `parts`, by stacking their factors."""
    scale = target.scaling["default"]
    rows: list[torch.Tensor] = []
    cols: list[torch.Tensor] = []
    for layer, share in parts:
        c = math.sqrt(share * layer.scaling["default"] / scale)
        rows.append(c * cast(nn.Linear, layer.lora_A["default"]).weight)  # (r_i, in)
        cols.append(c * cast(nn.Linear, layer.lora_B["default"]).weight)  # (out, r_i)
    cast(nn.Linear, target.lora_A["default"]).weight.copy_(torch.cat(rows, dim=0))
    cast(nn.Linear, target.lora_B["default"]).weight.copy_(torch.cat(cols, dim=1))
