"""A state tower run in two parts, for training that updates only its top layers (`trainer.train_layers`).

When only the top `top` transformer layers of the state tower train, everything below them (the embeddings and
the lower layers: the **trunk**) computes the same output for a state at every step of the run. So does the frozen
base's anchor term under `state_anchor` 'question' (`f_0(q) − f_0(s)`, `qrag.training.model.anchors`). Both are
computed once per state, when acting first meets it, and kept as `StateParts`; the online towers' top layers,
the target towers' top layers (their trunk is the same frozen weights) and the update's forward and backward then
run on them. The vectors are those of a full pass (up to float rounding) except that the trunk's dropout is off
in the update (acting encodes in eval mode).

Encoders whose layers can be reached (`layers_of`: a BERT-like `embeddings` and `encoder.layer`) run this way;
`check_splittable` names what is missing otherwise.

Shape legend: B states, L tokens, H hidden size, D vector dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers.masking_utils import create_bidirectional_mask

from qrag.training.overlay import ConfigError


@dataclass
class StateParts:
    """What a batch of states' vectors need that training does not change.

    Attributes:
        hidden: (B, L, H) the trunk's output for each state's tokens (right-padded).
        mask: (B, L) attention mask.
        anchor: (B, D) the frozen base's `f_0(q) − f_0(s)` under state anchor 'question'; None under 'none'.
        top: How many top layers run on `hidden`.
    """

    hidden: torch.Tensor
    mask: torch.Tensor
    anchor: torch.Tensor | None
    top: int

    @property
    def lengths(self) -> list[int]:
        """Each state's real tokens."""
        return [int(n) for n in self.mask.sum(dim=1).tolist()]

    def rows(self) -> list[StateParts]:
        """One `StateParts` per state, each cut to its own tokens (what a rollout keeps per transition)."""
        return [StateParts(self.hidden[b : b + 1, :n], self.mask[b : b + 1, :n],
                           None if self.anchor is None else self.anchor[b : b + 1], self.top)
                for b, n in enumerate(self.lengths)]

    @staticmethod
    def cat(parts: Sequence[StateParts], device: torch.device | None = None) -> StateParts:
        """Single or batched parts stacked into one batch, right-padded to the longest (on `device`)."""
        if not parts:
            raise ValueError("no state parts to stack.")
        width = max(p.hidden.shape[1] for p in parts)
        hidden = torch.cat([nn.functional.pad(p.hidden, (0, 0, 0, width - p.hidden.shape[1])) for p in parts])
        mask = torch.cat([nn.functional.pad(p.mask, (0, width - p.mask.shape[1])) for p in parts])
        anchors = [p.anchor for p in parts]
        anchor = None if any(a is None for a in anchors) else torch.cat(anchors)  # type: ignore[arg-type]
        out = StateParts(hidden, mask, anchor, parts[0].top)
        return out if device is None else out.to(device)

    def to(self, device: torch.device) -> StateParts:
        return StateParts(self.hidden.to(device), self.mask.to(device),
                          None if self.anchor is None else self.anchor.to(device), self.top)


def _model(encoder: nn.Module) -> nn.Module:
    """The transformers model under any LoRA wrapper (its layers hold the adapters)."""
    get_base = getattr(encoder, "get_base_model", None)
    return get_base() if callable(get_base) else encoder  # type: ignore[no-any-return]


def layers_of(encoder: nn.Module) -> tuple[nn.Module, nn.ModuleList] | None:
    """A BERT-like encoder's embedding module and its list of transformer layers (None when it has no such parts;
    under LoRA, the wrapped model's, adapters included)."""
    encoder = _model(encoder)
    embeddings = getattr(encoder, "embeddings", None)
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if not isinstance(embeddings, nn.Module) or not isinstance(layers, nn.ModuleList) or not len(layers):
        return None
    return embeddings, layers


def check_splittable(encoder: nn.Module, top: int, what: str) -> None:
    """Raise `ConfigError` unless `encoder` can run as a trunk and `top` top layers (`what`: the setting's name).

    Raises:
        ConfigError: no reachable layers, a decoder, or `top` outside 1 … layers - 1.
    """
    parts = layers_of(encoder)
    if parts is None or getattr(getattr(_model(encoder), "config", None), "is_decoder", False):
        raise ConfigError(f"{what}={top} trains the top layers of the state tower on a frozen trunk, which needs a "
                          f"BERT-like encoder (`embeddings` and `encoder.layer`); {type(encoder).__name__} has none: "
                          f"set {what}=0 (every layer trains).")
    if not 1 <= top < len(parts[1]):
        raise ConfigError(f"{what} must be between 1 and {len(parts[1]) - 1} (the state tower has {len(parts[1])} "
                          f"layers) or 0 (every layer trains), got {top}.")


def _mask(encoder: nn.Module, hidden: torch.Tensor, mask: torch.Tensor) -> Any:
    """The encoder's own 4-D bidirectional attention mask (or what its attention kernel takes instead)."""
    return create_bidirectional_mask(config=_model(encoder).config, inputs_embeds=hidden, attention_mask=mask)


def run_trunk(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, top: int) -> torch.Tensor:
    """(B, L, H) the output of the embeddings and every layer below the top `top`."""
    found = layers_of(encoder)
    assert found is not None, "check_splittable first"
    embeddings, layers = found
    hidden = embeddings(input_ids=input_ids)  # (B, L, H)
    mask = _mask(encoder, hidden, attention_mask)
    for layer in layers[: len(layers) - top]:
        hidden = layer(hidden, mask)
    return hidden  # type: ignore[no-any-return]


def run_top(encoder: nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor, top: int) -> torch.Tensor:
    """(B, L, H) the encoder's last hidden state from the trunk's output: its top `top` layers."""
    found = layers_of(encoder)
    assert found is not None, "check_splittable first"
    layers = found[1]
    mask = _mask(encoder, hidden, attention_mask)
    for layer in layers[len(layers) - top :]:
        hidden = layer(hidden, mask)
    return hidden


def shared_layers(encoder: nn.Module, other: nn.Module) -> int:
    """How many bottom transformer layers two BERT-like encoders share, embeddings included: each weight equal, in
    the same dtype (0 when their embeddings differ or either cannot be split). A state tower whose lower layers never
    trained (`trainer.train_layers`, LoRA adapters merged or still zero there) shares them with its frozen base."""
    a, b = layers_of(encoder), layers_of(other)
    if a is None or b is None or len(a[1]) != len(b[1]) or not _same(a[0], b[0]):
        return 0
    n = 0
    for la, lb in zip(a[1], b[1], strict=True):
        if not _same(la, lb):
            break
        n += 1
    return n


def _same(a: nn.Module, b: nn.Module) -> bool:
    """Whether two modules compute the same function with the same weights (their merged state, LoRA folded in)."""
    sa, sb = _effective(a), _effective(b)
    return sa.keys() == sb.keys() and all(sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]) for k in sa)


def _effective(module: nn.Module) -> dict[str, torch.Tensor]:
    """A module's weights with any LoRA adapter folded in (`W + B·A·scale`), by their base names."""
    state = {k.replace("base_layer.", ""): v for k, v in module.state_dict().items() if "lora_" not in k}
    for name, sub in module.named_modules():
        lora_a, lora_b = getattr(sub, "lora_A", None), getattr(sub, "lora_B", None)
        if not isinstance(lora_a, nn.ModuleDict) or not lora_a or getattr(sub, "merged", False):
            continue
        assert isinstance(lora_b, nn.ModuleDict)
        key = f"{name}.weight" if name else "weight"
        for adapter in lora_a:
            w_b, w_a = lora_b[adapter].weight, lora_a[adapter].weight  # (out, r), (r, in)
            assert isinstance(w_b, torch.Tensor) and isinstance(w_a, torch.Tensor)
            delta = w_b @ w_a * sub.scaling[adapter]  # (out, in)
            state[key] = state[key] + delta.to(state[key].dtype)
    return state

