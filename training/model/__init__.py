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

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from qrag.training.model.config import HopSettings, ModelConfig, Precision
    from qrag.training.model.folder import CheckpointError
    from qrag.training.model.precision import indexing_precision
    from qrag.training.model.qnet import QNetwork
    from qrag.training.model.shipped import shipped_names
    from qrag.training.model.towers import model_lock

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "config": ["HopSettings", "ModelConfig", "Precision"],
    "folder": ["CheckpointError"],
    "precision": ["indexing_precision"],
    "qnet": ["QNetwork"],
    "shipped": ["shipped_names"],
    "towers": ["model_lock"],
})
