"""Chunk-vector stores for multi-hop search (METHOD.md §2.2, §4.1).

Shape legend: B queries (states), N chunks, D vector dim, K results per query.

g_φ(c) depends only on the chunk text, so chunk vectors are computed once (by the index, or taken from a
`qrag.training.search.chunk_vectors` cache); every hop then re-encodes only the state. Three ways to serve them:

- `ChunkIndex` with `backend="torch"` (default): exact inner-product search, CPU or GPU; the only store
  that serves position modes 'relative' and 'absolute' (they need every unrotated vector each hop).
- `ChunkIndex` with `backend="faiss"`: a FAISS `IndexFlatIP` over the same vectors (position mode 'none').
- Any object implementing `ChunkStore` (e.g. `qrag.integrations.LangChainChunkStore` over a vector
  database with a dot-product metric), for corpora beyond one machine (position mode 'none').

`ChunkIndex.save` writes JSON + safetensors (or NumPy `.npy`), never pickle.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from qrag.training.atomic import atomic_dir, recover
from qrag.training.input_checks import check_ids, check_metadatas, check_texts, json_ok
from qrag.training.model.config import PRECISIONS, Precision
from qrag.training.model.qnet import QNetwork, model_lock
from qrag.training.search.filters import Filter
from qrag.training.search.lexical import LexicalIndex, LexicalLoadError, corpus_lexical

Backend = Literal["torch", "faiss"]
VectorFormat = Literal["safetensors", "numpy"]

INDEX_FORMAT = "qrag-chunk-index"
INDEX_VERSION = 1
INDEX_FILE = "index.json"
LEXICAL_DIR = "lexical"  # the BM25 index of the texts, when the index holds one
_VECTOR_FILES: dict[str, str] = {"safetensors": "vectors.safetensors", "numpy": "vectors.npy"}
PROGRESS_MIN_CHUNKS = 10_000  # show a progress bar by default from this corpus size on


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
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]] | None = None,
        where: Filter | None = None,
    ) -> list[list[ScoredChunk]]:
        """Per query row (B, D): at most `k` (chunk, inner product) pairs, best first, skipping the ids
        in `exclude[b]`, among the chunks `where` allows (a store translates it into its own filter, or raises
        `FilterError` for one it cannot)."""
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
        lexical: A BM25 index over the same texts (`LexicalIndex`), for models that weigh lexical evidence
            (METHOD.md §4.5); `with_lexical()` builds one.

    Example:
        >>> from qrag.training.model.qnet import QNetwork
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
        lexical: LexicalIndex | None = None,
        precision: Precision = "fp32",
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
        if lexical is not None and len(lexical) != n:
            raise ValueError(f"the lexical index covers {len(lexical)} chunks but the index holds {n}; build it from "
                             "the same texts.")
        self.lexical = lexical
        if precision not in PRECISIONS:
            raise ValueError(f"ChunkIndex precision must be one of {list(PRECISIONS)}, got {precision!r}.")
        self.precision: Precision = precision
        """The arithmetic the vectors were embedded in (`from_texts`); `add` embeds new texts in it too."""
        self._masks: dict[str, torch.Tensor] = {}  # filter key → (N,) row mask, cleared by every add or delete

    def with_lexical(self) -> ChunkIndex:
        """Build the BM25 index of the texts if the index has none yet (in place; returns the index). Indexes of the
        same texts share one (`lexical.corpus_lexical`)."""
        if self.lexical is None:
            self.lexical = corpus_lexical(tuple(self.texts))
        return self

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_texts(
        cls,
        model: QNetwork,
        texts: Iterable[str],
        ids: Iterable[str] | None = None,
        metadatas: Iterable[Mapping[str, Any]] | None = None,
        *,
        batch_size: int | None = None,
        show_progress: bool | None = None,
        backend: Backend = "torch",
        ordered: bool = False,
        precision: Precision = "fp32",
        lexical: bool = False,
    ) -> ChunkIndex:
        """Embed `texts` once with the chunk tower (length-sorted batches) and index them.

        Args:
            model: The Q-network whose chunk tower embeds the texts.
            texts: The chunks, in document order (any iterable, read once).
            ids: Unique ids (default: their positions as strings).
            metadatas: One JSON-serialisable dict per chunk.
            batch_size: Chunks per encoder batch (None: the model's default for its device, `QNetwork.embed_chunks`).
            show_progress: Progress bar; None shows it from 10 000 chunks on.
            backend: "torch" (exact) or "faiss".
            ordered: Declare the texts one document in reading order (position-aware models need it).
            precision: The encoder's arithmetic: 'fp32' (exact, the default), 'bf16' (about 3x faster on a CPU
                with AVX512-BF16, and on GPUs; vectors within about 0.5% of fp32's) or 'fp16' (GPU only).
            lexical: Also build the BM25 index of the texts (models that weigh lexical evidence need it).

        Raises:
            ValueError: an empty corpus, a non-string text (named by its index), duplicate ids, metadata
                that does not match the texts, or an unknown precision.
        """
        texts = check_texts(texts)
        ids_ = check_ids(ids, len(texts))
        metas = check_metadatas(metadatas, len(texts))
        show = len(texts) >= PROGRESS_MIN_CHUNKS if show_progress is None else show_progress
        model.check_chunk_lengths(texts, stacklevel=2)
        with model_lock(model):
            if precision == "fp32":  # duck-typed models need not take a precision
                vectors = model.embed_chunks(texts, batch_size=batch_size, show_progress=show)  # (N, D)
            else:
                vectors = model.embed_chunks(texts, batch_size=batch_size, show_progress=show, precision=precision)
        tower = getattr(model, "chunk_tower_fingerprint", None)  # duck-typed models may not have one
        return cls(vectors, texts, ids_, metas, backend=backend, encoder=model.config.encoder,
                   chunk_tower=tower() if callable(tower) else None, ordered=ordered,
                   lexical=LexicalIndex.from_texts(texts) if lexical else None, precision=precision)

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

    # ------------------------------------------------------------------ a living index
    def add(
        self, model: QNetwork, texts: Iterable[str], ids: Iterable[str] | None = None,
        metadatas: Iterable[Mapping[str, Any]] | None = None, *, batch_size: int | None = None,
    ) -> list[str]:
        """Embed `texts` with `model`'s chunk tower and append them (only they are embedded); returns their ids.

        They are embedded in the arithmetic the index was built in (`precision`).

        The index then equals one built from scratch on the whole set in that order (its BM25 index, when it has
        one, is rebuilt over every text, as a fresh build's would be). In an ordered (position-aware) index the
        new chunks follow the last one in reading order.

        Args:
            ids: Unique ids not in the index yet (default: new random ids).

        Raises:
            ValueError: an id already in the index (named), duplicate or malformed input, or a model whose chunk
                tower is not the one the index was embedded with.
        """
        texts = check_texts(texts)
        new_ids = check_ids([uuid.uuid4().hex for _ in texts] if ids is None else ids, len(texts))
        metas = check_metadatas(metadatas, len(texts))
        taken = [i for i in new_ids if i in self._row]
        if taken:
            raise ValueError(f"ids {taken[:5]} are already in this index; delete them first to replace them, or "
                             "add the texts under new ids.")
        tower = getattr(model, "chunk_tower_fingerprint", None)
        if self.chunk_tower is not None and callable(tower) and tower() != self.chunk_tower:
            raise ValueError("this model's chunk tower is not the one the index was embedded with; add with the "
                             "model that built the index (or rebuild the index with this one).")
        fresh = ChunkIndex.from_texts(model, texts, new_ids, metas, batch_size=batch_size, precision=self.precision,
                                      show_progress=False)
        self._replace_rows(torch.cat([self.vectors, fresh.vectors.to(self.device)]), self.texts + texts,
                           self.ids + new_ids, self.metadatas + metas)
        return new_ids

    def delete(self, ids: Iterable[str]) -> None:
        """Remove the chunks with these ids; the rest keep their order (in an ordered index, the chunks after a
        deleted one move up by one place: positions are places in the text as it now stands).

        Raises:
            ValueError: an id not in the index (named; nothing is deleted), or a deletion that would empty it.
        """
        if isinstance(ids, str) or not isinstance(ids, Iterable):
            raise ValueError(f"ids must be a list of chunk ids, got {ids!r:.80}.")
        gone = set(map(str, ids))
        missing = sorted(i for i in gone if i not in self._row)
        if missing:
            raise ValueError(f"ids {missing[:5]} are not in this index of {len(self)} chunks; nothing was deleted.")
        if len(gone) >= len(self):
            raise ValueError("cannot delete every chunk of an index; build a new one for a new corpus.")
        keep = [r for r, i in enumerate(self.ids) if i not in gone]
        self._replace_rows(self.vectors[keep], [self.texts[r] for r in keep], [self.ids[r] for r in keep],
                           [self.metadatas[r] for r in keep])

    def _replace_rows(self, vectors: torch.Tensor, texts: list[str], ids: list[str],
                      metadatas: list[dict[str, Any]]) -> None:
        self.vectors, self.texts, self.ids, self.metadatas = vectors, texts, ids, metadatas
        self._row = {cid: i for i, cid in enumerate(ids)}
        self._masks.clear()
        if self._faiss is not None:
            self._faiss = _build_faiss(self.vectors)
        if self.lexical is not None:
            self.lexical = LexicalIndex.from_texts(texts)

    def with_metadatas(self, metadatas: Sequence[Mapping[str, Any]]) -> ChunkIndex:
        """Replace every chunk's metadata (in row order; in place; returns the index): what filters read."""
        self.metadatas = check_metadatas(metadatas, len(self))
        self._masks.clear()
        return self

    def mask(self, filter_: Filter) -> torch.Tensor:
        """(N,) bool: the rows `filter_` lets a search take, on the vectors' device; cached per filter until the
        index changes (a predicate is evaluated each time).

        Raises:
            FilterError: metadata a condition cannot compare (the message names the key and the values).
        """
        key = filter_.key
        cached = self._masks.get(key) if key is not None else None
        if cached is None:
            cached = torch.tensor([filter_.matches(m) for m in self.metadatas], dtype=torch.bool, device=self.device)
            if key is not None:
                self._masks[key] = cached
        return cached

    # ------------------------------------------------------------------ search
    def topk(
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[int]] | None = None,
        allowed: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact top-k inner products, skipping the rows in `exclude[b]` and those `allowed` refuses.

        Args:
            queries: (B, D) query (state) vectors.
            k: Results per query; capped at the number of rows left.
            exclude: Per query, the rows that must not come back (the chunks already taken).
            allowed: (N,) the rows a filter allows (`mask`); None: every row. Scored exactly by torch even with
                the FAISS backend (a flat index: the same results).

        Returns:
            (scores, rows), each (B, K) with K = min(k, N − max excluded); a row that ran out of
            chunks is padded with score -inf and row -1.
        """
        if queries.dim() != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must be (B, {self.dim}) for this index, got shape {tuple(queries.shape)}.")
        width = max(len(e) for e in exclude) if exclude else 0
        kk = max(0, min(k, len(self)))
        if self._faiss is not None and allowed is None:
            return self._faiss_topk(queries, kk, exclude, width)
        scores = queries.to(self.device, torch.float32) @ self.vectors.T  # (B, N)
        if allowed is not None:
            scores.masked_fill_(~allowed.to(self.device), -math.inf)
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
        self, queries: torch.Tensor, k: int, exclude: Sequence[Collection[str]] | None = None,
        where: Filter | None = None,
    ) -> list[list[ScoredChunk]]:
        """`ChunkStore.search`: per query, at most `k` (chunk, inner product) pairs, best first (among the chunks
        `where` allows)."""
        ex_rows = [set(self.rows(e)) for e in exclude] if exclude else None
        top, rows = self.topk(queries, k, ex_rows, None if where is None else self.mask(where))  # (B, K) each
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
            "lexical": self.lexical is not None,
            "precision": self.precision,
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
            if self.lexical is not None:
                self.lexical.save(tmp / LEXICAL_DIR)
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
        lexical = None
        if head.get("lexical", False):  # absent in indexes saved before lexical evidence
            try:
                lexical = LexicalIndex.load(d / LEXICAL_DIR, count=len(texts))
            except LexicalLoadError as e:
                raise IndexLoadError(str(e)) from None
        try:
            index = cls(vectors, texts, ids, metas, backend=backend or head.get("backend", "torch"),
                        encoder=head.get("encoder"), chunk_tower=head.get("chunk_tower"),
                        ordered=bool(head.get("ordered", False)), lexical=lexical,
                        precision=head.get("precision", "fp32"))  # absent in indexes saved before `add`
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
