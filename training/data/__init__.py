"""Episodes and the benchmark data sources that produce them (`load_episodes` is the one entry point).

`build_episodes(data_config)` (training and validation episodes for a `DataConfig`, in `build.py`) is
imported on first use: it needs the training config, and importing this package stays free of torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qrag.training.data.episode import Episode, EpisodeError, iter_jsonl, read_jsonl, write_jsonl
from qrag.training.data.sources import SOURCES, iter_episodes, load_episodes

if TYPE_CHECKING:
    from qrag.training.data.build import build_episodes

__all__ = [
    "SOURCES",
    "Episode",
    "EpisodeError",
    "build_episodes",
    "iter_episodes",
    "iter_jsonl",
    "load_episodes",
    "read_jsonl",
    "write_jsonl",
]


def __getattr__(name: str) -> Any:
    if name == "build_episodes":
        from qrag.training.data.build import build_episodes

        return build_episodes
    raise AttributeError(f"module 'qrag.training.data' has no attribute {name!r}")
