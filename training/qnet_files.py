"""A `QNetwork`'s folder: what `save_pretrained` writes and `from_pretrained` reads (safetensors + JSON, never
pickle).

The folder holds `qrag_config.json` (the model config, which parameters were saved, the base encoder's
fingerprint, the hop settings), the weights and the tokenizer; `qrag.training.persist` reads and writes the
files themselves and turns every library failure into a `CheckpointError` naming the file.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from qrag.training.atomic import recover
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
from qrag.training.shipped import ShippedNameError, resolve_checkpoint

if TYPE_CHECKING:
    from qrag.training.qnet import QNetwork


def write_qnet(qnet: QNetwork, directory: Path, extra_files: dict[str, str] | None) -> Path:
    """`QNetwork.save_pretrained`: every weight ('full' mode, both towers), the trained ones only, or none (an
    `untrained` network names its base), with the header, the tokenizer and `extra_files`, in one atomic write."""
    saved = "none" if qnet.untrained else "all" if qnet.self_contained else "trainable"
    weights = {} if saved == "none" else qnet.trainable_state_dict()
    meta = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "model": dataclasses.asdict(qnet.config),
        "saved_params": saved,
        "base_fingerprint": qnet.base_fingerprint(),
        "hops": dataclasses.asdict(qnet.hop_settings),
    }
    encoder_config = qnet.base_encoder(qnet.state_tower).config if saved == "all" else None
    write_model_folder(directory, weights, meta, qnet.tokenizer, encoder_config, extra_files)
    return directory


def read_qnet(cls: type[QNetwork], directory: str | Path, encoder: str | None) -> QNetwork:
    """`QNetwork.from_pretrained`: the network of a folder (or a shipped checkpoint's name), in eval mode.

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
