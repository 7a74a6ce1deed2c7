"""Chunk-vector stores for multi-hop search (METHOD.md §2.2, §4.1).

Shape legend: B queries (states), N chunks, D vector dim, K results per query.

g_φ(c) depends only on the chunk text, so chunk vectors are computed once and cached here; every hop
then re-encodes only the state. Three ways to serve them:

- `ChunkIndex` with `backend="torch"` (default): exact inner-product search, CPU or GPU; the only store
  that serves position modes 'relative' and 'absolute' (they need every unrotated vector each hop).
- `ChunkIndex` with `backend="faiss"`: a FAISS `IndexFlatIP` over the same vectors (position mode 'none').
- Any object implementing `ChunkStore` (e.g. `qrag.integrations.LangChainChunkStore` over a vector
  database with a dot-product metric), for corpora beyond one machine (position mode 'none').

`ChunkIndex.save` writes JSON + safetensors (or NumPy `.npy`), never pickle.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from qrag.training.atomic import atomic_dir, recover
from qrag.training.validate import check_ids, check_metadatas, check_texts, json_ok

if TYPE_CHECKING:
    from qrag.training.qnet import QNetwork

Backend = Literal["torch", "faiss"]
VectorFormat = Literal["safetensors", "numpy"]

INDEX_FORMAT = "qrag-chunk-index"
INDEX_VERSION = 1
INDEX_FILE = "index.json"
_VECTOR_FILES: dict[str, str] = {"safetensors": "vectors.safetensors", "numpy": "vectors.npy"}
PROGRESS_MIN_CHUNKS = 10_000  # show a progress bar by default from this corpus size on

TRANSIENT_KEY_PREFIX = "network:"
"""`QNetwork.chunk_vectors_key` of a chunk tower that can train: valid for one network object only, so its
vectors are never written to disk by a `ChunkVectorFolder`."""


class IndexLoadError(ValueError):
    """A saved index folder is missing, incomplete or corrupt; the message names the file and the fix."""


@dataclass(frozen=True)
class Chunk:
    """One retrievable chunk.

    Args:
        id: A unique, stable identifier.
        text: The chunk text the chunk tower embedded.
        metadata: JSON-serialisable facts about the chunk (source, page, ...).
        position: Its place in document order, when known (None for stores that don't record it).
    """

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    position: int | None = None


ScoredChunk = tuple[Chunk, float]


@runtime_checkable
class ChunkStore(Protocol):
    """What `MultiHopSearcher` needs from a store in position mode 'none': top inner products.

    Implementations must rank by the raw inner product `⟨query, g_φ(c)⟩` (a dot-product metric, not
    cosine or L2), since that inner product is the Q-value the stop rule compares with its threshold.
    """

    def search(
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[ScoredChunk]]:
        """Per query row (B, D): at most `k` (chunk, inner product) pairs, best first, skipping the ids
        in `exclude[b]`."""
        ...


def search_rows(
    queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]] | None,
    fetch: Callable[[list[float], int], list[tuple[Chunk, float]]],
) -> list[list[ScoredChunk]]:
    """`ChunkStore.search` over a store that answers one vector at a time: `fetch(vector, n)` returns the top n
    (chunk, inner product) pairs; each row over-fetches by its excluded ids and drops them."""
    out: list[list[ScoredChunk]] = []
    for b, vector in enumerate(queries.detach().float().cpu().tolist()):  # (D,) per state row
        skip = exclude[b] if exclude else ()
        out.append([(c, s) for c, s in fetch(vector, k + len(skip)) if c.id not in skip][:k])
    return out


# Fast HF tokenizers refuse concurrent calls that set truncation/padding ("Already borrowed"), so encoder
# calls are serialised per model; scoring and top-k run outside the lock.
_MODEL_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def model_lock(model: Any) -> threading.Lock:
    """The lock that serialises encoder calls on `model` (shared by every searcher and adapter)."""
    with _LOCKS_GUARD:
        lock = _MODEL_LOCKS.get(model)
        if lock is None:
            lock = _MODEL_LOCKS[model] = threading.Lock()
        return lock


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

    def vectors(self, model: QNetwork, texts: Sequence[str], *, batch_size: int = 128,
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


class ChunkIndex:
    """Cached chunk-tower vectors with exact inner-product search (torch, CPU or GPU) or FAISS.

    Args:
        vectors: (N, D) unrotated chunk-tower vectors g_φ(c).
        texts: The N chunk texts, in document order.
        ids: N unique ids (default: "0", "1", ...).
        metadatas: N JSON-serialisable metadata dicts (default: empty).
        backend: "torch" (exact, default) or "faiss" (`IndexFlatIP`, needs `faiss-cpu`).
        encoder: The name of the encoder the vectors came from, recorded for error messages.
        ordered: Whether the texts are in a meaningful order (one document in reading order); a
            position-aware model (position_mode 'relative'/'absolute') scores by position and warns without it.

    Example:
        >>> from qrag.training.qnet import QNetwork
        >>> qnet = QNetwork.from_encoder("all-MiniLM-L6-v2")
        >>> index = ChunkIndex.from_texts(qnet, ["Mary went to the kitchen.", "Mary took the milk."])
        >>> states = qnet.embed_states(["Where is the milk?"], [[]])  # (1, 384)
        >>> [[c.id for c, _ in hits] for hits in index.search(states, k=1)]
        [['1']]
    """

    def __init__(
        self,
        vectors: torch.Tensor,
        texts: Sequence[str],
        ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        *,
        backend: Backend = "torch",
        encoder: str | None = None,
        ordered: bool = False,
        chunk_tower: str | None = None,
    ) -> None:
        texts = check_texts(texts)
        n = len(texts)
        if not isinstance(vectors, torch.Tensor) or vectors.dim() != 2 or vectors.shape[0] != n:
            shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
            raise ValueError(f"ChunkIndex needs (N, D) vectors for N={n} texts, got {shape}.")
        if not bool(torch.isfinite(vectors).all()):
            bad = int((~torch.isfinite(vectors)).any(dim=1).nonzero()[0, 0])
            raise ValueError(f"chunk vector {bad} holds NaN or infinite values (the model that embedded it is "
                             "damaged or diverged); re-embed the texts with a sound model.")
        self.vectors = vectors.float()  # (N, D)
        self.chunk_tower = chunk_tower
        """`QNetwork.chunk_tower_fingerprint()` of the tower that embedded the vectors, when known."""
        self.texts: list[str] = texts
        self.ids: list[str] = check_ids(ids, n)
        self.metadatas: list[dict[str, Any]] = check_metadatas(metadatas, n)
        self.encoder = encoder
        self.ordered = bool(ordered)
        self._row = {cid: i for i, cid in enumerate(self.ids)}
        if backend not in ("torch", "faiss"):
            raise ValueError(f"ChunkIndex backend must be 'torch' or 'faiss', got {backend!r}.")
        self.backend: Backend = backend
        self._faiss: Any = _build_faiss(self.vectors) if backend == "faiss" else None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_texts(
        cls,
        model: QNetwork,
        texts: Sequence[str],
        ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        *,
        batch_size: int = 128,
        show_progress: bool | None = None,
        backend: Backend = "torch",
        ordered: bool = False,
    ) -> ChunkIndex:
        """Embed `texts` once with the chunk tower (length-sorted batches) and index them.

        Args:
            model: The Q-network whose chunk tower embeds the texts.
            texts: The chunks, in document order.
            ids: Unique ids (default: their positions as strings).
            metadatas: One JSON-serialisable dict per chunk.
            batch_size: Chunks per encoder batch.
            show_progress: Progress bar; None shows it from 10 000 chunks on.
            backend: "torch" (exact) or "faiss".
            ordered: Declare the texts one document in reading order (position-aware models need it).

        Raises:
            ValueError: an empty corpus, a non-string text (named by its index), duplicate ids, or
                metadata that does not match the texts.
        """
        texts = check_texts(texts)
        ids_ = check_ids(ids, len(texts))
        metas = check_metadatas(metadatas, len(texts))
        show = len(texts) >= PROGRESS_MIN_CHUNKS if show_progress is None else show_progress
        model.check_chunk_lengths(texts, stacklevel=2)
        with model_lock(model):
            vectors = model.embed_chunks(texts, batch_size=batch_size, show_progress=show)  # (N, D)
        tower = getattr(model, "chunk_tower_fingerprint", None)  # duck-typed models may not have one
        return cls(vectors, texts, ids_, metas, backend=backend, encoder=model.config.encoder,
                   chunk_tower=tower() if callable(tower) else None, ordered=ordered)

    # ------------------------------------------------------------------ properties
    def __len__(self) -> int:
        return len(self.texts)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def device(self) -> torch.device:
        return self.vectors.device

    def to(self, device: torch.device | str) -> ChunkIndex:
        """Move the vectors (exact search runs where they live)."""
        self.vectors = self.vectors.to(device)
        return self

    def chunk(self, row: int) -> Chunk:
        """The chunk stored at `row` (its document position)."""
        return Chunk(self.ids[row], self.texts[row], self.metadatas[row], row)

    def rows(self, ids: Collection[str]) -> list[int]:
        """Rows of the given ids; unknown ids raise `KeyError` naming them."""
        missing = [i for i in ids if i not in self._row]
        if missing:
            raise KeyError(f"ids {missing[:5]} are not in this ChunkIndex of {len(self)} chunks.")
        return [self._row[i] for i in ids]

    # ------------------------------------------------------------------ search
    def topk(
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[int]] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact top-k inner products, skipping the rows in `exclude[b]`.

        Args:
            queries: (B, D) query (state) vectors.
            k: Results per query; capped at the number of rows left.
            exclude: Per query, the rows that must not come back (the chunks already taken).

        Returns:
            (scores, rows), each (B, K) with K = min(k, N − max excluded); a row that ran out of
            chunks is padded with score -inf and row -1.
        """
        if queries.dim() != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must be (B, {self.dim}) for this index, got shape {tuple(queries.shape)}.")
        width = max(len(e) for e in exclude) if exclude else 0
        kk = max(0, min(k, len(self)))
        if self._faiss is not None:
            return self._faiss_topk(queries, kk, exclude, width)
        scores = queries.to(self.device, torch.float32) @ self.vectors.T  # (B, N)
        if exclude:
            for b, rows in enumerate(exclude):
                if rows:
                    scores[b, list(rows)] = -math.inf
        top, rows_ = scores.topk(kk, dim=1)  # (B, K)
        return top, torch.where(torch.isinf(top), torch.full_like(rows_, -1), rows_)

    def _faiss_topk(
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[int]] | None, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # FAISS cannot mask, so over-fetch by the largest exclusion set and drop taken rows afterwards.
        fetch = min(len(self), k + width)
        q = np.ascontiguousarray(queries.detach().float().cpu().numpy())  # (B, D)
        dist, idx = self._faiss.search(q, fetch)  # (B, k + width) each
        top = torch.full((q.shape[0], k), -math.inf)  # (B, K)
        rows = torch.full((q.shape[0], k), -1, dtype=torch.long)  # (B, K)
        for b in range(q.shape[0]):
            skip = exclude[b] if exclude else ()
            kept = [(float(s), int(i)) for s, i in zip(dist[b], idx[b], strict=True) if i >= 0 and int(i) not in skip]
            for j, (s, i) in enumerate(kept[:k]):
                top[b, j], rows[b, j] = s, i
        return top, rows

    def search(
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[ScoredChunk]]:
        """`ChunkStore.search`: per query, at most `k` (chunk, inner product) pairs, best first."""
        ex_rows = [set(self.rows(e)) for e in exclude] if exclude else None
        top, rows = self.topk(queries, k, ex_rows)  # (B, K) each
        out: list[list[ScoredChunk]] = []
        for s_row, r_row in zip(top.tolist(), rows.tolist(), strict=True):
            out.append([(self.chunk(r), s) for s, r in zip(s_row, r_row, strict=True) if r >= 0])
        return out

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path, vector_format: VectorFormat = "safetensors") -> Path:
        """Write `index.json` (texts, ids, metadata) and the vectors; atomic (temp folder renamed).

        Raises:
            ValueError: metadata that JSON cannot hold (the message names the chunk), or an unknown format.
        """
        if vector_format not in _VECTOR_FILES:
            raise ValueError(f"vector_format must be one of {sorted(_VECTOR_FILES)}, got {vector_format!r}.")
        target = Path(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        header = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "count": len(self),
            "dim": self.dim,
            "backend": self.backend,
            "encoder": self.encoder,
            "ordered": self.ordered,
            "chunk_tower": self.chunk_tower,
            "vector_file": _VECTOR_FILES[vector_format],
            "ids": self.ids,
            "texts": self.texts,
            "metadatas": self.metadatas,
        }
        try:
            blob = json.dumps(header, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            bad = next((i for i, m in enumerate(self.metadatas) if not json_ok(m)), None)
            raise ValueError(
                f"cannot save the index: metadata of chunk {bad} ({self.ids[bad] if bad is not None else '?'!r}) is "
                f"not JSON-serialisable ({e}); keep metadata to strings, numbers, lists and dicts."
            ) from None
        with atomic_dir(target, replace=_replaceable) as tmp:
            vectors = self.vectors.detach().cpu().contiguous()  # (N, D)
            if vector_format == "safetensors":
                save_file({"vectors": vectors}, str(tmp / _VECTOR_FILES["safetensors"]))
            else:
                np.save(tmp / _VECTOR_FILES["numpy"], vectors.numpy(), allow_pickle=False)
            (tmp / INDEX_FILE).write_text(blob, encoding="utf-8")
        return target

    @classmethod
    def load(cls, folder: str | Path, *, backend: Backend | None = None, device: str | None = None) -> ChunkIndex:
        """Read a folder written by `save` (no pickle: JSON + safetensors or `.npy`).

        Args:
            folder: The index folder.
            backend: Override the saved search backend.
            device: Where to put the vectors (default CPU).

        Raises:
            IndexLoadError: the folder or a file is missing, or the files disagree with each other.
        """
        d = Path(folder)
        recover(d)
        head_path = d / INDEX_FILE
        if not head_path.is_file():
            raise IndexLoadError(
                f"{str(d)!r} is not a saved ChunkIndex: {INDEX_FILE} is missing (write one with ChunkIndex.save)."
            )
        try:
            head = json.loads(head_path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as e:  # JSONDecodeError, UnicodeDecodeError, PermissionError
            raise IndexLoadError(f"{head_path} is corrupt (not valid JSON: {e}); rebuild and save the index.") from None
        if not isinstance(head, dict) or head.get("format") != INDEX_FORMAT:
            raise IndexLoadError(f"{head_path} is not a qrag chunk-index header; rebuild and save the index.")
        if not isinstance(head.get("version", 0), int) or head.get("version", 0) > INDEX_VERSION:
            raise IndexLoadError(f"{str(d)!r} was written by a newer qrag (index version {head['version']}); upgrade qrag.")
        vec_name = str(head.get("vector_file"))
        vec_path = d / vec_name
        if vec_name not in _VECTOR_FILES.values() or not vec_path.is_file():
            raise IndexLoadError(f"{str(d)!r}: the vector file {vec_name!r} is missing; rebuild and save the index.")
        try:
            if vec_name.endswith(".npy"):
                vectors = torch.from_numpy(np.load(vec_path, allow_pickle=False))  # (N, D)
            else:
                vectors = load_file(str(vec_path))["vectors"]  # (N, D)
        except Exception as e:  # noqa: BLE001 - any reader failure means a corrupt file
            raise IndexLoadError(f"{vec_path} is corrupt ({type(e).__name__}: {e}); rebuild and save the index.") from None
        texts, ids, metas = head.get("texts"), head.get("ids"), head.get("metadatas")
        count = head.get("count")
        if not (isinstance(texts, list) and isinstance(ids, list) and isinstance(metas, list)):
            raise IndexLoadError(f"{head_path} lacks its texts, ids or metadatas lists; rebuild and save the index.")
        if not (len(texts) == len(ids) == len(metas) == count == vectors.shape[0]) or vectors.dim() != 2:
            raise IndexLoadError(
                f"{str(d)!r} is inconsistent: {count} chunks in the header, {len(texts)} texts, {len(ids)} ids, "
                f"vectors of shape {tuple(vectors.shape)}; rebuild and save the index."
            )
        if vectors.is_floating_point() and not bool(torch.isfinite(vectors).all()):
            raise IndexLoadError(f"{vec_path} holds NaN or infinite vectors (damaged file or a diverged model); "
                                 "rebuild and save the index.")
        try:
            index = cls(vectors, texts, ids, metas, backend=backend or head.get("backend", "torch"),
                        encoder=head.get("encoder"), chunk_tower=head.get("chunk_tower"),
                        ordered=bool(head.get("ordered", False)))
        except (ValueError, TypeError) as e:
            raise IndexLoadError(f"{head_path} holds invalid chunks ({e}); rebuild and save the index.") from None
        return index.to(device) if device else index


def _replaceable(folder: Path) -> bool:
    """A folder `ChunkIndex.save` may replace: empty, or an earlier index."""
    return (folder / INDEX_FILE).is_file() or not any(folder.iterdir())


def _build_faiss(vectors: torch.Tensor) -> Any:
    try:
        import faiss  # lazy: an optional dependency
    except ImportError:
        raise ImportError("backend='faiss' needs faiss: pip install 'qrag[faiss]' (or use backend='torch').") from None
    index = faiss.IndexFlatIP(int(vectors.shape[1]))
    index.add(np.ascontiguousarray(vectors.detach().float().cpu().numpy()))  # (N, D)
    return index
