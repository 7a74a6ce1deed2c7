"""The model floor: the two-tower Q-network and what it is made of, its folder format and the shipped names.

Imports only the data floor's types and the helpers beside it (`qrag.training.atomic`, `.overlay`,
`.input_checks`). The names below are the facade the adapters and eval import; they load on first use, so
`import qrag.training.model` stays free of torch.

- `qnet.py`: `QNetwork`, one class: construction, encoding, scoring, its folder, serving;
- `config.py`: `ModelConfig` and the `HopSettings` saved with a model;
- `towers.py`, `anchors.py`, `positions.py`: the towers, state anchors, chunk positions and the fused scoring;
- `encoders.py`, `shipped.py`, `folder.py`: base encoders, shipped checkpoints, the files of a model folder;
- `precision.py`, `cpu_linear.py`, `graphed.py`: fast arithmetic (bf16 where native, oneDNN, CUDA graphs);
- `blend.py`, `compress.py`: a fine-tune blended with its start, a full fine-tune as LoRA adapters.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qrag.training.model.config import HopSettings, ModelConfig, Precision
    from qrag.training.model.folder import CheckpointError
    from qrag.training.model.qnet import QNetwork
    from qrag.training.model.shipped import shipped_names
    from qrag.training.model.towers import model_lock

_EXPORTS = {
    "QNetwork": "qrag.training.model.qnet",
    "CheckpointError": "qrag.training.model.folder",
    "ModelConfig": "qrag.training.model.config",
    "HopSettings": "qrag.training.model.config",
    "Precision": "qrag.training.model.config",
    "model_lock": "qrag.training.model.towers",
    "shipped_names": "qrag.training.model.shipped",
}

__all__ = ["CheckpointError", "HopSettings", "ModelConfig", "Precision", "QNetwork", "model_lock",
           "shipped_names"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'qrag.training.model' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
