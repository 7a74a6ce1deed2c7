"""qrag.training: the core, in four floors; each imports only the floors listed before it.

    from qrag.training import QNetwork, MultiHopSearcher, ChunkIndex, load_model

- `data/`: episodes and the benchmark data that produce them (imports no other floor);
- `model/`: the two-tower Q-network, its towers, positions, encoders, folder format and shipped names;
- `search/`: the hop engine (`hops.py`), chunk indexes, lexical evidence and `MultiHopSearcher`; its `__init__` is the
  facade the adapters and eval import;
- `learn/`: the TD math (`td.py`), the MDP, acting, evaluation, the trainer and its checkpoints, the training
  config, the commands `qrag-train`, `qrag-blend`, `qrag-data` (`cli/`) and `qrag-adapt` (`adapt/`).

Beside them, helpers every floor may use and which import no floor: `atomic.py` (atomic writes), `overlay.py`
(config overlays), `input_checks.py` (checks of what users pass in). The names above load on first use, so
`import qrag.training` stays cheap (no torch until one is touched). docs/GUIDE.md, "The layout", tours them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from qrag.training.model.qnet import QNetwork
    from qrag.training.search.index import ChunkIndex
    from qrag.training.search.searcher import MultiHopSearcher, load_model

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "model.qnet": ["QNetwork"],
    "search.index": ["ChunkIndex"],
    "search.searcher": ["MultiHopSearcher", "load_model"],
})
