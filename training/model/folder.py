"""A model folder's files: `qrag_config.json`, `model.safetensors`, `tokenizer/`, `encoder/`, written and read.

Every library error becomes a `CheckpointError` naming the file.

safetensors, tokenizers, transformers and `json` each fail in their own way on a truncated, empty, edited or
foreign file; the readers here turn those failures, and weights holding NaN or infinity, into one error type
whose message names the file and what to do.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedTokenizerBase

from qrag.training.atomic import atomic_dir
from qrag.training.model.config import HopSettings, ModelConfig
from qrag.training.model.encoders import EncoderLoadError, load_encoder, load_tokenizer
from qrag.training.model.shipped import shipped_names
from qrag.training.overlay import ConfigError

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
        return load_tokenizer(folder)
    except Exception as e:  # noqa: BLE001 - tokenizers/transformers raise many types for a damaged folder
        raise CheckpointError(f"{folder}: the tokenizer cannot be loaded ({type(e).__name__}: {short(e)}); save the "
                              "checkpoint again.") from None


def write_model_folder(target: Path, weights: dict[str, torch.Tensor], meta: dict[str, Any],
                       tokenizer: PreTrainedTokenizerBase, encoder_config: PretrainedConfig | None,
                       extra_files: dict[str, str] | None) -> None:
    """Write weights (safetensors), the JSON header, the tokenizer, the base encoder's config (self-contained
    checkpoints) and `extra_files` (name → text) as one atomic folder swap."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in weights.items()}
    with atomic_dir(target, check=read_checkpoint_meta, replace=replaceable) as tmp:
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": CHECKPOINT_FORMAT})
        (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        tokenizer.save_pretrained(str(tmp / "tokenizer"))
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        if encoder_config is not None:
            encoder_config.save_pretrained(str(tmp / ENCODER_CONFIG_DIR))


def read_model_config(directory: Path, meta: dict[str, Any], encoder: str | None) -> ModelConfig:
    """The checkpoint's model settings, with the base encoder relocated to `encoder` when given."""
    try:
        config = ModelConfig(**meta["model"])
    except TypeError as e:
        raise CheckpointError(f"{directory / CONFIG_FILE}: the model section does not match this qrag version ({e}).") from None
    if encoder is not None:
        config = dataclasses.replace(config, encoder=encoder)
    try:
        config.validate()
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{directory / CONFIG_FILE}: invalid model settings ({e}); save the checkpoint again.") from None
    return config


def read_base_encoder(directory: Path, meta: dict[str, Any], config: ModelConfig) -> nn.Module:
    """The encoder both towers start from: built from the stored config for a self-contained checkpoint (its
    weights come with it), else the base encoder the checkpoint names."""
    if meta["saved_params"] == "all":
        try:
            base = AutoModel.from_config(AutoConfig.from_pretrained(str(directory / ENCODER_CONFIG_DIR)))
        except Exception as e:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError, ...
            raise CheckpointError(f"{directory / ENCODER_CONFIG_DIR}: the encoder config is missing or corrupt "
                                  f"({type(e).__name__}: {short(e)}); save the checkpoint again.") from None
        if hasattr(base, "pooler"):
            base.pooler = None
        return base  # type: ignore[no-any-return]
    try:
        return load_encoder(config.encoder)[0]
    except EncoderLoadError as e:
        raise CheckpointError(
            f"checkpoint {str(directory)!r} stores only trained parameters and needs its base encoder: {e} "
            "Pass `encoder=` with a local copy of that encoder."
        ) from None


def read_hops(meta: dict[str, Any], directory: Path) -> HopSettings:
    """The checkpoint's hop settings; a checkpoint saved before they were stored gets the defaults."""
    raw = meta.get("hops", {})
    try:
        if not isinstance(raw, dict):
            raise ConfigError(f"expected an object, got {type(raw).__name__}")
        return HopSettings(**raw).validate()
    except (TypeError, ConfigError) as e:
        raise CheckpointError(f"{directory / CONFIG_FILE}: the 'hops' section is invalid ({e}); "
                              "save the model again or fix the file.") from None


def load_checked(module: nn.Module, tensors: dict[str, torch.Tensor], expected: set[str], directory: Path) -> None:
    """Load a checkpoint's tensors into `module`; every name in `expected` must be there and none unknown."""
    try:
        missing, unexpected = module.load_state_dict(tensors, strict=False)
    except RuntimeError as e:  # size mismatch
        raise CheckpointError(f"{directory / WEIGHTS_FILE} does not fit its model config (tensor shapes differ: "
                              f"{short(e)}); was it written by another model or edited?") from None
    lost = sorted(set(missing) & expected)
    if lost or unexpected:
        raise CheckpointError(
            f"checkpoint {str(directory)!r} does not fit its model config: missing {lost[:3]}, unexpected "
            f"{sorted(unexpected)[:3]} (was it written by another qrag version or edited?)."
        )
