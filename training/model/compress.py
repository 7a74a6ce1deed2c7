"""A fully fine-tuned Q-network re-expressed as low-rank adapters on its base encoder, to keep it in a few MB.

Full fine-tuning of the state tower is the fastest way to train on a CPU (docs/RESULTS.md, "CPU speed
levers"), but its checkpoint is the whole tower (~87 MB for MiniLM). The change it makes to each linear
weight, ΔW = W - W₀, is close to low-rank, so its top `rank` singular directions, ΔW ≈ U_r S_r V_rᵀ, become
LoRA adapters with B = U_r √S_r, A = √S_r V_rᵀ and alpha = rank (PEFT's scale alpha / r is then 1):

    >>> small, report = low_rank_adapters(QNetwork.from_pretrained("runs/demo/train/best"), rank=32)  # doctest: +SKIP
    >>> small.save_pretrained("babilong-adapters")  # a LoRA checkpoint, ~5 MB beside the bundled base  # doctest: +SKIP

What the fine-tune changed outside the linear weights (embeddings, biases, LayerNorms) goes back to the
base; `LowRankReport` says how large that part was and how much of each ΔW the rank kept, and the
result should be evaluated before it replaces the full model (`scripts/ship_checkpoint.py` does).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import cast

import torch
from peft.tuners.lora import LoraLayer
from torch import nn

from qrag.training.model.qnet import QNetwork, Tower

LINEAR_TARGETS = ("query", "key", "value", "dense")
"""The linear layers of a BERT-style encoder: attention projections, attention output, feed-forward."""
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LowRankReport:
    """How faithful the adapters are to the fine-tune they replace."""

    rank: int
    matrices: int
    """Linear weights turned into adapters (per trained tower, summed)."""
    min_energy_kept: float
    """The smallest fraction of ‖ΔW‖² kept by the rank over those weights (1.0: exact)."""
    dropped_fraction: float
    """‖Δ of every other parameter‖ / ‖Δ of all parameters‖: what was reset to the base."""
    adapter_parameters: int


@torch.no_grad()
def low_rank_adapters(trained: QNetwork, rank: int, *, base: str | None = None) -> tuple[QNetwork, LowRankReport]:
    """LoRA adapters of rank `rank` that approximate a full fine-tune, on the same base encoder.

    Args:
        trained: A network trained with `train_mode='full'` (either `train_towers`).
        rank: Adapter rank (a matrix of smaller rank is kept exactly).
        base: Where the base encoder is (default: the one `trained.config.encoder` names).

    Returns:
        The adapted network (train_mode 'lora' on every linear layer of the trained towers, in eval mode)
        and a `LowRankReport`.

    Raises:
        ValueError: `trained` is not a full fine-tune, `rank` < 1, or `base` is not the encoder it was
            trained from.
    """
    if trained.config.train_mode != "full":
        raise ValueError(f"low_rank_adapters needs a full fine-tune; this network has train_mode="
                         f"{trained.config.train_mode!r} and its checkpoint already holds only its trained part.")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be a positive integer, got {rank!r}.")
    adapted = QNetwork.from_config(dataclasses.replace(
        trained.config, encoder=base or trained.config.encoder, train_mode="lora", lora_rank=rank,
        lora_alpha=float(rank), lora_dropout=0.0, lora_target_modules=list(LINEAR_TARGETS)))
    if trained.chunk_tower_frozen and adapted.base_fingerprint() != trained.base_fingerprint():
        raise ValueError(f"base encoder {base or trained.config.encoder!r} is not the one this network was trained "
                         "from (its embeddings differ); pass base= with that encoder.")
    towers = [(trained.state_tower, adapted.state_tower)]
    if not trained.chunk_tower_frozen:
        towers.append((trained.chunk_tower, adapted.chunk_tower))
    energies: list[float] = []
    adapted_sq = dropped_sq = 0.0
    n_params = 0
    for source, target in towers:
        weights = _adapt_tower(source, target, rank, energies)
        n_params += sum(p.numel() for n, p in target.named_parameters() if "lora_" in n)
        base_params = _base_named_parameters(target)
        for name, p in source.encoder.named_parameters():
            sq = float((p.float() - base_params[name].float()).pow(2).sum())
            if name in weights:
                adapted_sq += sq
            else:
                dropped_sq += sq
    total = adapted_sq + dropped_sq
    report = LowRankReport(
        rank=rank, matrices=len(energies), min_energy_kept=min(energies, default=1.0),
        dropped_fraction=(dropped_sq / total) ** 0.5 if total > 0 else 0.0, adapter_parameters=n_params,
    )
    adapted.hop_settings = trained.hop_settings  # the horizon and calibrated stop rule travel with the weights
    return adapted.eval(), report


def _adapt_tower(source: Tower, target: Tower, rank: int, energies: list[float]) -> set[str]:
    """Set each adapter of `target` to the rank-`rank` part of `source`'s change; the weight names adapted."""
    modules = dict(source.encoder.named_modules())
    adapted: set[str] = set()
    for name, module in target.encoder.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        original = name.removeprefix(PEFT_PREFIX)
        lora_a, lora_b = cast(nn.Linear, module.lora_A["default"]), cast(nn.Linear, module.lora_B["default"])
        base_weight = cast(nn.Linear, module.get_base_layer()).weight
        delta = (cast(nn.Linear, modules[original]).weight - base_weight).float()  # (out, in)
        u, s, vh = torch.linalg.svd(delta, full_matrices=False)
        k = min(rank, s.numel())
        root = s[:k].sqrt()
        a = torch.zeros_like(lora_a.weight)  # (rank, in)
        b = torch.zeros_like(lora_b.weight)  # (out, rank)
        a[:k] = root[:, None] * vh[:k]
        b[:, :k] = u[:, :k] * root
        lora_a.weight.copy_(a)
        lora_b.weight.copy_(b)
        assert module.scaling["default"] == 1.0  # alpha == rank
        total = float(s.pow(2).sum())
        energies.append(float(s[:k].pow(2).sum()) / total if total > 0 else 1.0)
        adapted.add(f"{original}.weight")
    return adapted


def _base_named_parameters(tower: Tower) -> dict[str, torch.Tensor]:
    """The base encoder's own parameters under a PEFT wrapper, by their unwrapped names."""
    return {name.removeprefix(PEFT_PREFIX).replace(".base_layer.", "."): p
            for name, p in tower.encoder.named_parameters() if "lora_" not in name}
