"""Chunk vectors kept by text, in memory or in a folder between runs (METHOD.md §4.1).

A chunk vector g_φ(c) depends only on the chunk tower and the text, so every distinct text is embedded once
per chunk tower: by a training run with a frozen chunk tower, by a benchmark sweep, by the main job.
`ChunkVectorCache` holds one tower's vectors (safetensors + JSON on disk, never pickle);
`ChunkVectorFolder` keeps one cache per tower in a folder. (External vector databases are `ChunkStore`s,
in `qrag.training.search.index`.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from qrag.training.atomic import atomic_dir
from qrag.training.model.qnet import TRANSIENT_KEY_PREFIX, QNetwork, model_lock
from qrag.training.search.index import IndexLoadError


class ChunkVectorCache:
    """Chunk vectors by text for one chunk tower, each distinct text embedded once.

    A chunk vector depends only on the chunk tower (`QNetwork.chunk_vectors_key`) and the text, and
    haystacks built from the same books share most of their sentences, so a training run with a frozen
    chunk tower, or a benchmark sweep, embeds each distinct sentence once instead of once per episode.
    `save` / `load` write safetensors + JSON, with the key, so a file is never used for another tower.

    Args:
        key: The chunk tower's `chunk_vectors_key()`.
        max_texts: Most vectors kept; past that the cache starts afresh (bounds memory in long sweeps).
    """

    VECTORS_FILE = "vectors.safetensors"
    TEXTS_FILE = "texts.json"
    FORMAT = "qrag-chunk-vector-cache"

    def __init__(self, key: str, max_texts: int = 2_000_000) -> None:
        self.key, self.max_texts = key, max_texts
        self._row: dict[str, int] = {}
        self._buf = torch.empty(0, 0)  # (capacity, D) float32 on the CPU; rows past len(self) are unused

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, text: object) -> bool:
        return text in self._row

    def vectors(self, model: QNetwork, texts: Sequence[str], *, batch_size: int | None = None,
                show_progress: bool = False) -> torch.Tensor:
        """(N, D) chunk vectors of `texts` on the model's device, embedding only the texts not seen before.

        Raises:
            ValueError: `model`'s chunk tower is not the one this cache holds vectors of.
        """
        if model.chunk_vectors_key() != self.key:
            raise ValueError(f"this chunk-vector cache holds vectors of {self.key!r}, not of the given model's "
                             f"chunk tower ({model.chunk_vectors_key()!r}); use one cache per chunk tower.")
        missing = [t for t in dict.fromkeys(texts) if t not in self._row]
        if len(self._row) + len(missing) > self.max_texts:
            self._row.clear()
            missing = list(dict.fromkeys(texts))
        if missing:
            with model_lock(model):
                fresh = model.embed_chunks(missing, batch_size=batch_size, show_progress=show_progress)  # (M, D)
            self._append(missing, fresh.float().cpu())
        rows = torch.tensor([self._row[t] for t in texts], dtype=torch.long)  # (N,)
        return self._buf[rows].to(model.device)  # (N, D)

    def _append(self, texts: list[str], vectors: torch.Tensor) -> None:
        n, m = len(self._row), len(texts)
        if self._buf.shape[0] < n + m or self._buf.shape[1] != vectors.shape[1]:
            grown = torch.empty(max(2 * self._buf.shape[0], n + m, 1024), vectors.shape[1])  # (capacity, D)
            if self._buf.shape[1] == vectors.shape[1]:
                grown[:n] = self._buf[:n]
            self._buf = grown
        self._buf[n : n + m] = vectors
        self._row.update((t, n + i) for i, t in enumerate(texts))

    def save(self, folder: str | Path) -> Path:
        """Write the cache to `folder` (atomically: a temporary folder renamed into place)."""
        texts = sorted(self._row, key=self._row.__getitem__)
        with atomic_dir(Path(folder)) as tmp:
            save_file({"vectors": self._buf[: len(texts)].contiguous()}, str(tmp / self.VECTORS_FILE),
                      metadata={"format": self.FORMAT, "key": self.key})
            (tmp / self.TEXTS_FILE).write_text(json.dumps(texts), encoding="utf-8")
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path, key: str) -> ChunkVectorCache:
        """Read a cache written by `save` for the chunk tower `key`.

        Raises:
            IndexLoadError: the folder is missing, incomplete or corrupt, or holds another tower's vectors.
        """
        d = Path(folder)
        vec_file, text_file = d / cls.VECTORS_FILE, d / cls.TEXTS_FILE
        if not vec_file.is_file() or not text_file.is_file():
            raise IndexLoadError(f"{str(d)!r} is not a chunk-vector cache ({cls.VECTORS_FILE} and {cls.TEXTS_FILE} "
                                 "are needed); delete it and it is rebuilt.")
        try:
            with safe_open(str(vec_file), framework="pt") as f:
                meta = f.metadata() or {}
                vectors = f.get_tensor("vectors")
            texts = json.loads(text_file.read_text(encoding="utf-8"))
        except (OSError, ValueError, SafetensorError) as e:
            raise IndexLoadError(f"chunk-vector cache {str(d)!r} cannot be read ({e}); delete it and it is rebuilt.") from None
        if meta.get("format") != cls.FORMAT or meta.get("key") != key:
            raise IndexLoadError(f"chunk-vector cache {str(d)!r} holds vectors of {meta.get('key')!r}, not of "
                                 f"{key!r}; delete it (or use another folder) and it is rebuilt.")
        if not isinstance(texts, list) or len(texts) != vectors.shape[0] or len(set(texts)) != len(texts):
            raise IndexLoadError(f"chunk-vector cache {str(d)!r}: {cls.TEXTS_FILE} does not match the vectors; "
                                 "delete it and it is rebuilt.")
        cache = cls(key)
        cache._append([str(t) for t in texts], vectors.float())
        return cache


class ChunkVectorFolder:
    """Chunk-vector caches kept in a folder between runs, one sub-folder per chunk tower.

    `get(key)` loads that chunk tower's `ChunkVectorCache` the first time it is asked for (or starts an
    empty one); `save()` writes back each cache that grew since. A sweep run again, resumed, or extended to
    more lengths or methods then embeds no sentence twice. Sub-folders are named by a digest of the key
    (the key itself is inside, checked on load). Vectors are kept in the precision they were computed in.
    Only frozen chunk towers are kept (untrained encoders, checkpoints trained with `train_towers='state'`):
    the vectors of a trained chunk tower are cached in memory for the run and computed again the next.

    Args:
        folder: Where the caches live (created by the first `save`).
        max_texts: Most vectors per cache (see `ChunkVectorCache`).

    Raises:
        ValueError: `folder` exists and is not a folder.
    """

    def __init__(self, folder: str | Path, max_texts: int = 2_000_000) -> None:
        self.folder, self.max_texts = Path(folder), max_texts
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"chunk-vector folder {str(self.folder)!r} is a file; pass a folder (it is created "
                             "if missing).")
        self._caches: dict[str, ChunkVectorCache] = {}
        self._saved: dict[str, int] = {}

    def path(self, key: str) -> Path:
        """The sub-folder of chunk tower `key`."""
        return self.folder / hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]

    def get(self, key: str) -> ChunkVectorCache:
        """The cache of chunk tower `key`, loaded from its sub-folder when there is one.

        Raises:
            IndexLoadError: the sub-folder is incomplete or corrupt (the message says to delete it).
        """
        if key not in self._caches:
            path = self.path(key)
            kept = path.exists() and not key.startswith(TRANSIENT_KEY_PREFIX)
            cache = ChunkVectorCache.load(path, key) if kept else ChunkVectorCache(key, self.max_texts)
            cache.max_texts = self.max_texts
            self._caches[key], self._saved[key] = cache, len(cache)
        return self._caches[key]

    def save(self) -> list[Path]:
        """Write each cache that changed since it was loaded or last saved (atomically); the paths written."""
        written = []
        for key, cache in self._caches.items():
            if len(cache) != self._saved[key] and not key.startswith(TRANSIENT_KEY_PREFIX):
                written.append(cache.save(self.path(key)))
                self._saved[key] = len(cache)
        return written
