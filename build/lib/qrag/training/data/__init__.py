"""Episodes and the benchmark data sources that produce them (`load_episodes` is the one entry point)."""

from qrag.training.data.episode import Episode, EpisodeError, iter_jsonl, read_jsonl, write_jsonl
from qrag.training.data.sources import SOURCES, iter_episodes, load_episodes

__all__ = [
    "SOURCES",
    "Episode",
    "EpisodeError",
    "iter_episodes",
    "iter_jsonl",
    "load_episodes",
    "read_jsonl",
    "write_jsonl",
]
