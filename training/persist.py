"""Reading a `QNetwork` checkpoint folder: every library error becomes a `CheckpointError` naming the file.

safetensors, tokenizers, transformers and `json` each fail in their own way on a truncated, empty, edited or
foreign file; the readers here turn those failures, and weights holding NaN or infinity, into one error type
whose message names the file and what to do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from qrag.training.shipped import shipped_names

CHECKPOINT_FORMAT = "qrag-qnetwork"
CHECKPOINT_VERSION = 1
CONFIG_FILE = "qrag_config.json"
WEIGHTS_FILE = "model.safetensors"
ENCODER_CONFIG_DIR = "encoder"


class CheckpointError(ValueError):
    """A checkpoint folder is missing, incomplete, damaged or does not match its base encoder."""


def read_checkpoint_meta(directory: Path) -> dict[str, Any]:
    """The JSON header of a checkpoint folder, validated."""
    if not directory.is_dir():
        shipped = ", ".join(shipped_names()) or "none installed"
        raise CheckpointError(
            f"checkpoint folder {str(directory)!r} does not exist (checkpoints shipped with qrag: {shipped})."
        )
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (directory / name).is_file():
            raise CheckpointError(
                f"{str(directory)!r} is not a qrag checkpoint: {name} is missing (save with QNetwork.save_pretrained)."
            )
    try:
        meta = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"{directory / CONFIG_FILE} cannot be read as JSON ({short(e)}); save the "
                              "checkpoint again.") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"{directory / CONFIG_FILE} is not a qrag checkpoint header (format {found!r}).")
    version = meta.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"{directory / CONFIG_FILE}: 'version' must be an integer, got {version!r}.")
    if version > CHECKPOINT_VERSION:
        raise CheckpointError(f"{str(directory)!r} was written by a newer qrag (format version {version}); upgrade qrag.")
    if not isinstance(meta.get("model"), dict) or meta.get("saved_params") not in ("all", "trainable", "none"):
        raise CheckpointError(f"{directory / CONFIG_FILE} lacks its 'model' settings or 'saved_params' ('all', 'trainable' or "
                              "'none'); save the checkpoint again.")
    return meta  # type: ignore[no-any-return]


def check_finite(tensors: dict[str, torch.Tensor], where: str) -> None:
    """Raise `CheckpointError` naming the first tensor holding NaN or infinity."""
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{where}: tensor {name!r} holds NaN or infinite values (training diverged or "
                                  "the file is damaged); use an earlier checkpoint.")


def short(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def replaceable(folder: Path) -> bool:
    """A folder `save_pretrained` may replace: empty, or an earlier checkpoint."""
    return (folder / CONFIG_FILE).is_file() or not any(folder.iterdir())


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path} is not a readable safetensors file ({type(e).__name__}: {short(e)}); it is "
                              "truncated or damaged: save the checkpoint again or use an earlier one.") from None
    check_finite(tensors, str(path))
    return tensors


def read_tokenizer(folder: Path) -> PreTrainedTokenizerBase:
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is missing: a qrag checkpoint keeps its tokenizer there; save the "
                              "checkpoint again.")
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as e:  # noqa: BLE001 - tokenizers/transformers raise many types for a damaged folder
        raise CheckpointError(f"{folder}: the tokenizer cannot be loaded ({type(e).__name__}: {short(e)}); save the "
                              "checkpoint again.") from None
