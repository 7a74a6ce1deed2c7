"""Episodes and the benchmark data sources that produce them."""

from training.data.episode import Episode, EpisodeError, iter_jsonl, read_jsonl, write_jsonl

__all__ = ["Episode", "EpisodeError", "iter_jsonl", "read_jsonl", "write_jsonl"]
