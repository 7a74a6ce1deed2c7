"""qrag.training: the Q-network, its soft Q(λ) training, multi-hop search, indexes and data.

    from qrag.training import QNetwork, MultiHopSearcher, ChunkIndex, load_model

The main types are imported on first use, so `import qrag.training` stays cheap (no torch until one is
touched); submodules (`qrag.training.learn.trainer`, `.search`, `.data`, ...) import as usual.

Where things are:

- the TD update: `trainer.Trainer.update` (one loop over minibatches; the math in `td.py`);
- the hop loop: `hops.greedy_hops` and `hops.beam_hops` (one hop for many states: `hops.q_values`);
- the network: `qnet.QNetwork` (its folder: `qnet_files.py`; serving precision: `qnet_serving.py`);
- search settings: `search_settings.py` (`HopSettings` saved with a model, `SearchConfig` per search);
- the user-facing searcher: `search.MultiHopSearcher`; training settings: `config.py`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qrag.training.model.qnet import QNetwork
    from qrag.training.search.index import ChunkIndex
    from qrag.training.search.searcher import MultiHopSearcher, load_model

_EXPORTS = {
    "QNetwork": "qrag.training.model.qnet",
    "ChunkIndex": "qrag.training.search.index",
    "MultiHopSearcher": "qrag.training.search.searcher",
    "load_model": "qrag.training.search.searcher",
}

__all__ = ["ChunkIndex", "MultiHopSearcher", "QNetwork", "load_model"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'qrag.training' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
