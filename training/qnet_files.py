"""A `QNetwork`'s folder: `save_pretrained` writes it and `from_pretrained` reads it (safetensors + JSON, never
pickle).

The folder holds `qrag_config.json` (the model config, which parameters were saved, the base encoder's
fingerprint, the hop settings), the weights and the tokenizer; `qrag.training.persist` reads and writes the
files themselves and turns every library failure into a `CheckpointError` naming the file.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from qrag.training.atomic import recover
from qrag.training.config import ModelConfig
from qrag.training.encoders import resolve_encoder
from qrag.training.persist import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    WEIGHTS_FILE,
    CheckpointError,
    load_checked,
    read_base_encoder,
    read_checkpoint_meta,
    read_hops,
    read_model_config,
    read_tokenizer,
    read_weights,
    write_model_folder,
)
from qrag.training.search_settings import HopSettings
from qrag.training.shipped import ShippedNameError, resolve_checkpoint
from qrag.training.towers import Tower


class CheckpointMixin(nn.Module):
    """`save_pretrained` and `from_pretrained` of `QNetwork`."""

    config: ModelConfig
    hop_settings: HopSettings
    tokenizer: PreTrainedTokenizerBase
    state_tower: Tower
    _untrained_sums: list[float] | None

    if TYPE_CHECKING:  # defined by QNetwork
        @property
        def untrained(self) -> bool: ...

        @property
        def self_contained(self) -> bool: ...

        def trainable_state_dict(self) -> dict[str, torch.Tensor]: ...

        def base_fingerprint(self) -> str: ...

        def _weight_sums(self) -> list[float]: ...

        @staticmethod
        def base_encoder(tower: Tower) -> PreTrainedModel: ...

        @classmethod
        def _assemble(cls, state_enc: nn.Module, chunk_enc: nn.Module, tokenizer: PreTrainedTokenizerBase,
                      config: ModelConfig) -> Self: ...

    def save_pretrained(self, directory: str | Path, extra_files: dict[str, str] | None = None) -> Path:
        """Write safetensors + JSON (+ tokenizer, + `extra_files`: name → text); atomic: a temp folder renamed
        into place, so the files beside the model (e.g. the trainer's eval.json) are never from another save.

        In 'full' mode with both towers trained the folder is self-contained; otherwise it holds only the
        trained parameters and names its base encoder (the state tower's weights alone with
        `train_towers='state'`). An `untrained` network whose base encoder can be found offline stores no
        weights at all: the folder names its base.
        """
        target = Path(directory)
        saved = "none" if self.untrained else "all" if self.self_contained else "trainable"
        weights = {} if saved == "none" else self.trainable_state_dict()
        meta: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "model": dataclasses.asdict(self.config),
            "saved_params": saved,
            "base_fingerprint": self.base_fingerprint(),
            "hops": dataclasses.asdict(self.hop_settings),
        }
        encoder_config = self.base_encoder(self.state_tower).config if saved == "all" else None
        write_model_folder(target, weights, meta, self.tokenizer, encoder_config, extra_files)
        return target

    @classmethod
    def from_pretrained(cls, directory: str | Path, *, encoder: str | None = None) -> Self:
        """Load a folder written by `save_pretrained`, in eval mode.

        Args:
            directory: the checkpoint folder, or the name of a checkpoint shipped with qrag
                (`qrag.training.shipped.shipped_names()`, e.g. "qrag/babilong-minilm").
            encoder: override where the base encoder is found (for checkpoints that store only trained
                parameters, when the base lives elsewhere on this machine).

        Raises:
            CheckpointError: not a qrag checkpoint, incomplete, or saved on a different base encoder.
        """
        try:
            d = resolve_checkpoint(directory)
        except ShippedNameError as e:
            raise CheckpointError(str(e)) from None
        recover(d)
        meta = read_checkpoint_meta(d)
        config = read_model_config(d, meta, encoder)
        tensors = read_weights(d / WEIGHTS_FILE)
        base = read_base_encoder(d, meta, config)
        qnet = cls._assemble(base, copy.deepcopy(base), read_tokenizer(d / "tokenizer"), config)
        if meta["saved_params"] != "all" and qnet.base_fingerprint() != meta.get("base_fingerprint"):
            raise CheckpointError(
                f"checkpoint {str(d)!r} was trained on a different base encoder than {config.encoder!r} "
                f"(resolved to {resolve_encoder(config.encoder)!r}); pass `encoder=` with the right one."
            )
        expected = {"none": set(), "trainable": set(qnet.trainable_state_dict())}.get(meta["saved_params"],
                                                                                     set(qnet.state_dict()))
        load_checked(qnet, tensors, expected, d)
        qnet.hop_settings = read_hops(meta, d)
        if meta["saved_params"] == "none":
            qnet._untrained_sums = qnet._weight_sums()
        return qnet.eval()
