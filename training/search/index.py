"""Chunk-vector stores for multi-hop search (METHOD.md §2.2, §4.1).

Shape legend: B queries (states), N chunks, D vector dim, K results per query.

g_φ(c) depends only on the chunk text, so chunk vectors are computed once (by the index, or taken from a
`qrag.training.search.chunk_vectors` cache); every hop then re-encodes only the state. Three ways to serve them:

- `ChunkIndex` with `backend="torch"` (default): exact inner-product search, CPU or GPU; the only store
  that serves position modes 'relative' and 'absolute' (they need every unrotated vector each hop).
- `ChunkIndex` with `backend="faiss"`: a FAISS `IndexFlatIP` over the same vectors answers `search` and `topk` when
  no filter, window or position is involved (the same results as torch's; adds extend it, a delete rebuilds it on
  the next search). `MultiHopSearcher` scores every chunk with the model at each hop (the lexical evidence, windows
  and positions need every score), so it reads the vectors, not FAISS.
- Any object implementing `ChunkStore` (e.g. `qrag.integrations.LangChainChunkStore` over a vector
  database with a dot-product metric), for corpora beyond one machine (position mode 'none').

`ChunkIndex.save` writes JSON + safetensors (or NumPy `.npy`), never pickle (`index_folder`).

A chunk longer than the chunk tower reads is one row whose score is its best window's (`search.windows`,
METHOD.md §4.6): `from_texts` and `add` embed its later windows beside the vectors, deletes drop them with it.

A living index serves reads beside writes. Its state is one immutable version (vectors, texts, ids, metadata, BM25,
filter masks); `add`, `delete` and `with_metadatas` build the next version beside the current one and publish it in
one assignment, under a writer lock. `snapshot()` pins the current version: a search reads it from its first hop to
its last, so one that started before a change returns the old version's answer and one that starts after it never
sees a deleted chunk. What an add costs is what it adds: the vectors grow in a buffer with spare rows (amortised
O(added), never read past a version's own rows), the BM25 index takes a segment (`LexicalIndex.added`), and the id
lookup is shared and only appended to; a delete copies the surviving rows (no re-embedding, no re-tokenising).
Filter masks carry to the next version (an add evaluates the filter on its rows alone; a delete keeps the survivors'
bits), windows grow in a buffer as the vectors do, and metadata goes in and comes out as the caller's own copy.
A version, its rows and its masks are `versions`' concern.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch

from qrag.training.input_checks import check_ids, check_metadatas, check_texts
from qrag.training.model.config import PRECISIONS, Precision
from qrag.training.model.qnet import QNetwork, model_lock
from qrag.training.search.filters import Filter
from qrag.training.search.index_folder import (
    INDEX_FILE,
    IndexLoadError,
    SavedIndex,
    VectorFormat,
    read_index,
    write_index,
)
from qrag.training.search.lexical import LexicalIndex, corpus_lexical, forget_corpus
from qrag.training.search.versions import (
    MASK_CACHE_SIZE,
    FaissRows,
    MaskCache,
    Rows,
    Version,
    faiss_module,
    own_metadatas,
    with_room,
)
from qrag.training.search.windows import Windows, best_window_scores

__all__ = ["INDEX_FILE", "LONG_CHUNKS", "MASK_CACHE_SIZE", "Backend", "Chunk", "ChunkIndex", "ChunkStore",
           "IndexLoadError", "LongChunks", "Rows", "ScoredChunk", "VectorFormat", "search_rows", "weighs_pairs"]
"""The names importers take from here, those of `versions` and `index_folder` included."""

Backend = Literal["torch", "faiss"]
LongChunks = Literal["windows", "cut"]
LONG_CHUNKS: tuple[LongChunks, ...] = ("windows", "cut")

PROGRESS_MIN_CHUNKS = 10_000  # show a progress bar by default from this corpus size on


def weighs_pairs(model: object) -> bool:
    """Whether `model`'s lexical evidence weighs word pairs (`HopSettings.pair_weight` > 0, METHOD.md §4.5), so the
    lexical index it searches must hold them."""
    settings = getattr(model, "hop_settings", None)
    return settings is not None and settings.pair_weight > 0


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
        mask_cache_size: Filter masks kept per version (`MaskCache`; least recently used dropped first).
        windows: The later windows of the chunks longer than the chunk tower reads (`QNetwork.embed_windows`;
            `from_texts` embeds them): a search scores such a chunk by its best window (`search.windows`).
        long_chunks: What `add` does with chunks longer than the chunk tower reads: 'windows' (embed their later
            windows too) or 'cut' (their first window only).

    Reads beside writes: every search reads one version (`snapshot`), and `add` / `delete` / `with_metadatas` publish
    the next one in one step, so searches in other threads never see a half-made change (module docstring).

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
        mask_cache_size: int = MASK_CACHE_SIZE,
        windows: Windows | None = None,
        long_chunks: LongChunks = "cut",
    ) -> None:
        texts = check_texts(texts)
        n = len(texts)
        _check_vectors(vectors, n)
        _check_windows(windows, n, int(vectors.shape[1]))
        _check_long_chunks(long_chunks)
        self.long_chunks: LongChunks = long_chunks
        self.chunk_tower = chunk_tower
        """`QNetwork.chunk_tower_fingerprint()` of the tower that embedded the vectors, when known."""
        self.encoder = encoder
        self.ordered = bool(ordered)
        if backend not in ("torch", "faiss"):
            raise ValueError(f"ChunkIndex backend must be 'torch' or 'faiss', got {backend!r}.")
        self.backend: Backend = backend
        if backend == "faiss":
            faiss_module()  # refuse at once where faiss is missing
        if lexical is not None and len(lexical) != n:
            raise ValueError(f"the lexical index covers {len(lexical)} chunks but the index holds {n}; build it from "
                             "the same texts.")
        if precision not in PRECISIONS:
            raise ValueError(f"ChunkIndex precision must be one of {list(PRECISIONS)}, got {precision!r}.")
        self.precision: Precision = precision
        """The arithmetic the vectors were embedded in (`from_texts`); `add` embeds new texts in it too."""
        _check_cache_size(mask_cache_size)
        self.mask_cache_size = mask_cache_size
        ids_ = check_ids(ids, n)
        self._writer = threading.Lock()  # one change at a time; readers never wait
        self._frozen = False
        self._version = Version(with_room(vectors.float(), n), n, texts, ids_, own_metadatas(metadatas, n),
                                 {cid: i for i, cid in enumerate(ids_)}, lexical, MaskCache(mask_cache_size),
                                 windows=None if windows is None else windows.to(vectors.device))

    # ------------------------------------------------------------------ versions
    def snapshot(self) -> ChunkIndex:
        """A read-only view of the index as it is now: what one search reads from its first hop to its last. Changes
        made after it (by any thread) are not in it; it is cheap (no copy) and refuses changes itself."""
        view = object.__new__(ChunkIndex)
        view.__dict__.update(self.__dict__)
        view._frozen = True
        view._writer = threading.Lock()
        return view

    def _publish(self, version: Version) -> None:
        """Make `version` the index's current one (one assignment: readers see the old version or the new one)."""
        old = self._version
        self._version = version
        if old.lexical_shared and old.lexical is not version.lexical:
            forget_corpus(old.texts)  # the cache must not keep the replaced corpus's BM25 alive

    def _check_writable(self) -> None:
        if self._frozen:
            raise ValueError("this is a snapshot of an index (read-only); add to or delete from the index itself.")

    @property
    def vectors(self) -> torch.Tensor:
        """(N, D) the chunk vectors of the current version."""
        return self._version.vectors

    @property
    def texts(self) -> Rows[str]:
        """The chunk texts of the current version, in row order (a read-only sequence)."""
        return self._version.texts

    @property
    def ids(self) -> Rows[str]:
        return self._version.ids

    @property
    def metadatas(self) -> Rows[dict[str, Any]]:
        """The chunks' metadata of the current version, in row order; each dict is a copy (editing it changes
        nothing stored: replace metadata with `with_metadatas`)."""
        return self._version.metadatas

    @property
    def lexical(self) -> LexicalIndex | None:
        return self._version.lexical

    @property
    def windows(self) -> Windows | None:
        """The later windows of the chunks longer than the chunk tower reads (None: none was embedded)."""
        return self._version.windows

    def with_lexical(self, *, pairs: bool = False) -> ChunkIndex:
        """Build the BM25 index of the texts if the index has none yet, or (`pairs`) one without word pairs (in
        place; returns the index). Indexes of the same texts share one (`lexical.corpus_lexical`)."""

        def lacking(lexical: LexicalIndex | None) -> bool:
            return lexical is None or (pairs and lexical.pairs is None)

        if not lacking(self._version.lexical):
            return self
        # Built outside the writer lock from the version of now (the build takes a while: 90 s at 400 000 chunks),
        # so adds, deletes and other searches go on meanwhile; what they changed is applied before publishing.
        v = self._version
        built, shared = corpus_lexical(tuple(v.texts), pairs=pairs), True
        while True:
            now = self._version
            if now is not v and lacking(now.lexical):
                built = built.caught_up(v.texts, v.ids, now.texts, now.ids)
                if shared:
                    forget_corpus(v.texts)  # the cache must not keep the replaced corpus's BM25 alive
                v, shared = now, False
            with self._writer:
                if not lacking(self._version.lexical):
                    return self  # another thread published one meanwhile
                if self._version is v:
                    self._version = replace(v, lexical=built, lexical_shared=shared)
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
        mask_cache_size: int = MASK_CACHE_SIZE,
        long_chunks: LongChunks = "windows",
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
            lexical: Also build the BM25 index of the texts (models that weigh lexical evidence need it), with
                their word pairs where the model weighs them (`HopSettings.pair_weight`).
            mask_cache_size: Filter masks kept per version (`MaskCache`).
            long_chunks: Chunks longer than the chunk tower reads (`max_chunk_tokens`): 'windows' (the default)
                also embeds their later windows, and a search scores each by its best window (the chunk is still
                one result; `search.windows`); 'cut' reads their first `max_chunk_tokens` tokens only (with a
                `ChunkLengthWarning`). Models that score by position (`position_mode` other than 'none') cut.

        Raises:
            ValueError: an empty corpus, a non-string text (named by its index), duplicate ids, metadata
                that does not match the texts, an unknown precision, a bad cache size or an unknown `long_chunks`;
                all before any text is embedded.
        """
        texts = check_texts(texts)
        ids_ = check_ids(ids, len(texts))
        metas = check_metadatas(metadatas, len(texts))
        _check_cache_size(mask_cache_size)
        _check_long_chunks(long_chunks)
        if backend not in ("torch", "faiss"):
            raise ValueError(f"ChunkIndex backend must be 'torch' or 'faiss', got {backend!r}.")
        show = len(texts) >= PROGRESS_MIN_CHUNKS if show_progress is None else show_progress
        long_chunks = long_chunks if _reads_windows(model) else "cut"
        vectors = _embed(model, texts, batch_size, show, precision, warn=long_chunks == "cut")  # (N, D)
        windows = (Windows.of(model, texts, batch_size=batch_size, show_progress=show, precision=precision)
                   if long_chunks == "windows" else None)
        tower = getattr(model, "chunk_tower_fingerprint", None)  # duck-typed models may not have one
        return cls(vectors, texts, ids_, metas, backend=backend, encoder=model.config.encoder,
                   chunk_tower=tower() if callable(tower) else None, ordered=ordered,
                   lexical=LexicalIndex.from_texts(texts, pairs=weighs_pairs(model)) if lexical else None,
                   precision=precision,
                   mask_cache_size=mask_cache_size, windows=windows, long_chunks=long_chunks)

    # ------------------------------------------------------------------ properties
    def __len__(self) -> int:
        return self._version.count

    @property
    def dim(self) -> int:
        return int(self._version.storage.shape[1])

    @property
    def device(self) -> torch.device:
        return self._version.storage.device

    def to(self, device: torch.device | str) -> ChunkIndex:
        """Move the vectors (exact search runs where they live)."""
        with self._writer:
            v = self._version
            if v.storage.device != torch.device(device):
                self._version = replace(v, storage=v.vectors.to(device), masks=MaskCache(self.mask_cache_size),
                                        faiss=FaissRows(), windows=None if v.windows is None else v.windows.to(device))
        return self

    def chunk(self, row: int) -> Chunk:
        """The chunk stored at `row` (its document position); its metadata is a copy, the caller's to change."""
        v = self._version
        return Chunk(v.ids[row], v.texts[row], v.metadatas[row], row)

    def rows(self, ids: Collection[str]) -> list[int]:
        """Rows of the given ids; unknown ids raise `KeyError` naming them."""
        v = self._version
        found = [v.row(i) for i in ids]
        missing = [i for i, r in zip(ids, found, strict=True) if r is None]
        if missing:
            raise KeyError(f"ids {missing[:5]} are not in this ChunkIndex of {v.count} chunks.")
        return [r for r in found if r is not None]

    def __contains__(self, cid: object) -> bool:
        return isinstance(cid, str) and self._version.row(cid) is not None

    # ------------------------------------------------------------------ a living index
    def add(
        self, model: QNetwork, texts: Iterable[str], ids: Iterable[str] | None = None,
        metadatas: Iterable[Mapping[str, Any]] | None = None, *, batch_size: int | None = None,
    ) -> list[str]:
        """Embed `texts` with `model`'s chunk tower and append them (only they are embedded); returns their ids.

        They are embedded in the arithmetic the index was built in (`precision`), and long ones as it treats them
        (`long_chunks`: their later windows too, or cut).

        The index then equals one built from scratch on the whole set in that order (its BM25 index, when it has
        one, takes the new texts as a segment with a fresh build's scores). In an ordered (position-aware) index the
        new chunks follow the last one in reading order. Searches running meanwhile read the index as it was.

        Args:
            ids: Unique ids not in the index yet (default: new random ids).

        Raises:
            ValueError: an id already in the index (named), duplicate or malformed input, or a model whose chunk
                tower is not the one the index was embedded with; all before any text is embedded.
        """
        texts, new_ids, metas = self._new_rows(texts, ids, metadatas)
        self._check_new_ids(new_ids)
        tower = getattr(model, "chunk_tower_fingerprint", None)
        if self.chunk_tower is not None and callable(tower) and tower() != self.chunk_tower:
            raise ValueError("this model's chunk tower is not the one the index was embedded with; add with the "
                             "model that built the index (or rebuild the index with this one).")
        windows = self.long_chunks == "windows" and _reads_windows(model)
        vectors = _embed(model, texts, batch_size, False, self.precision, warn=not windows)  # (n, D)
        return self._append(vectors, texts, new_ids, metas,
                            Windows.of(model, texts, batch_size=batch_size, precision=self.precision) if windows else None)

    def add_vectors(
        self, vectors: torch.Tensor, texts: Iterable[str], ids: Iterable[str] | None = None,
        metadatas: Iterable[Mapping[str, Any]] | None = None, *, windows: Windows | None = None,
    ) -> list[str]:
        """`add` of texts whose chunk vectors are already computed (by this index's chunk tower, e.g. read from a
        `ChunkVectorFolder`); returns their ids. Costs what it adds: no row already in the index is copied or
        re-scored (the vector buffer keeps spare rows and doubles when full). Only the vectors given are added: a
        long text is scored by its first window unless `windows` (its later ones, owners counted from 0 over these
        texts, as `QNetwork.embed_windows` gives them) are passed too.

        Raises:
            ValueError: vectors that are not (n, D) finite for the n texts, an id already in the index, or
                malformed texts, ids or metadata.
        """
        return self._append(vectors, *self._new_rows(texts, ids, metadatas), windows)

    def _new_rows(self, texts: Iterable[str], ids: Iterable[str] | None,
                  metadatas: Iterable[Mapping[str, Any]] | None) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        """The texts, ids (default: new random ids) and metadata of an add, checked; refused on a snapshot."""
        self._check_writable()
        texts = check_texts(texts)
        new_ids = check_ids([uuid.uuid4().hex for _ in texts] if ids is None else ids, len(texts))
        return texts, new_ids, own_metadatas(metadatas, len(texts))

    def _append(self, vectors: torch.Tensor, texts: list[str], new_ids: list[str],
                metas: list[dict[str, Any]], windows: Windows | None = None) -> list[str]:
        """Publish the version with these checked rows appended (`add_vectors`' docstring says what it costs)."""
        _check_vectors(vectors, len(texts), self.dim)
        _check_windows(windows, len(texts), self.dim)
        with self._writer:
            self._check_new_ids(new_ids)
            v = self._version
            n, m = v.count, len(texts)
            lexical = v.lexical.added(texts) if v.lexical is not None else None  # first: it may refuse the texts
            storage = v.storage
            if n + m > storage.shape[0]:
                storage = with_room(storage[:n], 2 * (n + m))
            storage[n : n + m] = vectors.to(storage.device, storage.dtype)  # rows no published version reads
            # Append-only, past every published version's `count`: no version sees these items but the new one.
            del v.all_texts[n:], v.all_ids[n:], v.all_metadatas[n:]  # what a failed add left (nothing, normally)
            v.all_texts.extend(texts)
            v.all_ids.extend(new_ids)
            v.all_metadatas.extend(metas)
            v.rows.update((cid, n + i) for i, cid in enumerate(new_ids))
            self._publish(Version(storage, n + m, v.all_texts, v.all_ids, v.all_metadatas, v.rows,
                                   lexical, v.masks.carried(), faiss=v.faiss,  # a moved buffer holds the same rows
                                   windows=_joined(v.windows, windows, n, storage.device)))
        return new_ids

    def _check_new_ids(self, new_ids: list[str]) -> None:
        taken = [i for i in new_ids if i in self]
        if taken:
            raise ValueError(f"ids {taken[:5]} are already in this index; delete them first to replace them, or "
                             "add the texts under new ids.")

    def delete(self, ids: Iterable[str]) -> None:
        """Remove the chunks with these ids; the rest keep their order (in an ordered index, the chunks after a
        deleted one move up by one place: positions are places in the text as it now stands). Searches running
        meanwhile read the index as it was; a search that starts after `delete` returns never sees these chunks.

        Raises:
            ValueError: ids given as one string, an id not in the index (named; nothing is deleted), or a deletion
                that would empty it.
        """
        self._check_writable()
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise ValueError(f"ids must be a list of chunk ids, got {ids!r:.80}; for one id pass [id].")
        gone = set(map(str, ids))
        if not gone:
            return  # nothing to delete: the version stays, with its masks and FAISS index
        with self._writer:
            v = self._version
            missing = sorted(i for i in gone if v.row(i) is None)
            if missing:
                raise ValueError(f"ids {missing[:5]} are not in this index of {v.count} chunks; nothing was deleted.")
            if len(gone) >= v.count:
                raise ValueError("cannot delete every chunk of an index; build a new one for a new corpus.")
            dropped = sorted(r for i in gone if (r := v.row(i)) is not None)
            keep = torch.ones(v.count, dtype=torch.bool)
            keep[dropped] = False
            kept = keep.nonzero().squeeze(1)  # (N - d,)
            storage = with_room(v.vectors.index_select(0, kept.to(v.storage.device)), len(kept))  # no version reads it yet
            flags = keep.tolist()
            texts = [t for t, k in zip(v.texts, flags, strict=True) if k]
            new_ids = [t for t, k in zip(v.ids, flags, strict=True) if k]
            metas = [t for t, k in zip(v.stored_metadatas, flags, strict=True) if k]
            lexical = v.lexical.deleted(dropped) if v.lexical is not None else None
            windows = None if v.windows is None else v.windows.kept(keep)
            self._publish(Version(storage, len(texts), texts, new_ids, metas, {c: i for i, c in enumerate(new_ids)},
                                   lexical, v.masks.carried(keep), windows=windows))

    def with_metadatas(self, metadatas: Sequence[Mapping[str, Any]]) -> ChunkIndex:
        """Replace every chunk's metadata (in row order; in place; returns the index): what filters read."""
        self._check_writable()
        with self._writer:
            v = self._version
            self._version = replace(v, all_metadatas=own_metadatas(metadatas, v.count),
                                    masks=MaskCache(self.mask_cache_size))
        return self

    def mask(self, filter_: Filter) -> torch.Tensor:
        """(N,) bool: the rows `filter_` lets a search take, on the vectors' device; cached per filter and index
        version (`MaskCache`, at most `mask_cache_size` masks; a predicate is evaluated each time). A mask the
        version before held is carried: after an add the filter reads the added rows' metadata only.

        Raises:
            FilterError: metadata a condition cannot compare (the message names the key and the values).
        """
        v = self._version
        key = filter_.key
        cached = v.masks.get(key) if key is not None else None
        if cached is not None and len(cached) == v.count:
            return cached
        start = 0 if cached is None else len(cached)
        rows = v.all_metadatas[start : v.count]  # the stored dicts (the filter only reads them); O(rows read)
        new = torch.tensor([filter_.matches(m) for m in rows], dtype=torch.bool, device=v.storage.device)
        if key is None or not v.masks.size:
            return new
        if cached is None:
            v.masks.put(key, new)
            return new
        return v.masks.extended(key, cached, new)

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
                the FAISS backend (a flat index: the same results), as is an index holding windows (a long chunk
                scores its best window's product).

        Returns:
            (scores, rows), each (B, K) with K = min(k, N − max excluded); a row that ran out of
            chunks is padded with score -inf and row -1.
        """
        v = self._version
        if queries.dim() != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must be (B, {self.dim}) for this index, got shape {tuple(queries.shape)}.")
        if allowed is not None and allowed.shape != (v.count,):
            raise ValueError(f"a filter mask is ({v.count},) for this index, got {tuple(allowed.shape)}; take masks "
                             "and searches from one snapshot().")
        width = max(len(e) for e in exclude) if exclude else 0
        kk = max(0, min(k, v.count))
        if self.backend == "faiss" and allowed is None and not (v.windows is not None and len(v.windows)):
            return self._faiss_topk(v, queries, kk, exclude, width)
        q = queries.to(v.storage.device, torch.float32)  # (B, D)
        scores = q @ v.vectors.T  # (B, N)
        if v.windows is not None:
            scores = best_window_scores(scores, q @ v.windows.vectors.T, v.windows.owner)  # (B, N)
        if allowed is not None:
            scores.masked_fill_(~allowed.to(v.storage.device), -math.inf)
        if exclude:
            for b, rows in enumerate(exclude):
                if rows:
                    scores[b, list(rows)] = -math.inf
        top, rows_ = scores.topk(kk, dim=1)  # (B, K)
        return top, torch.where(torch.isinf(top), torch.full_like(rows_, -1), rows_)

    def _faiss_topk(
        self, v: Version, queries: torch.Tensor, k: int, exclude: Sequence[Collection[int]] | None, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # FAISS cannot mask, so over-fetch by the largest exclusion set and drop taken rows afterwards.
        fetch = min(v.count, k + width)
        q = np.ascontiguousarray(queries.detach().float().cpu().numpy())  # (B, D)
        dist, idx = v.faiss.search(v.vectors, q, fetch)  # (B, k + width) each
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
        `where` allows); reads one version of the index throughout."""
        view = self.snapshot()
        ex_rows = [set(view.rows(e)) for e in exclude] if exclude else None
        top, rows = view.topk(queries, k, ex_rows, None if where is None else view.mask(where))  # (B, K) each
        out: list[list[ScoredChunk]] = []
        for s_row, r_row in zip(top.tolist(), rows.tolist(), strict=True):
            out.append([(view.chunk(r), s) for s, r in zip(s_row, r_row, strict=True) if r >= 0])
        return out

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path, vector_format: VectorFormat = "safetensors") -> Path:
        """Write `index.json` (texts, ids, metadata) and the vectors; atomic (temp folder renamed; `index_folder`).

        Raises:
            ValueError: metadata that JSON cannot hold (the message names the chunk), or an unknown format.
        """
        v = self.snapshot()._version  # one version throughout, whatever other threads change meanwhile
        settings = {"backend": self.backend, "encoder": self.encoder, "ordered": self.ordered,
                    "chunk_tower": self.chunk_tower, "precision": self.precision, "long_chunks": self.long_chunks}
        return write_index(folder, SavedIndex(v.vectors, list(v.texts), list(v.ids), list(v.stored_metadatas),
                                              v.lexical, v.windows, settings), vector_format)

    @classmethod
    def load(cls, folder: str | Path, *, backend: Backend | None = None, device: str | None = None) -> ChunkIndex:
        """Read a folder written by `save` (no pickle: JSON + safetensors or `.npy`; `index_folder`).

        Args:
            folder: The index folder.
            backend: Override the saved search backend.
            device: Where to put the vectors (default CPU).

        Raises:
            IndexLoadError: the folder or a file is missing, or the files disagree with each other.
        """
        saved = read_index(folder)
        try:
            index = cls(saved.vectors, saved.texts, saved.ids, saved.metadatas, lexical=saved.lexical,
                        windows=saved.windows, **{**saved.settings, "backend": backend or saved.settings["backend"]})
        except (ValueError, TypeError) as e:
            raise IndexLoadError(f"{Path(folder) / INDEX_FILE} holds invalid chunks ({e}); rebuild and save the "
                                 "index.") from None
        return index.to(device) if device else index


def _check_vectors(vectors: Any, n: int, dim: int | None = None) -> None:
    """Refuse anything but (n, D) finite vectors (D = `dim` when given)."""
    if (not isinstance(vectors, torch.Tensor) or vectors.dim() != 2 or vectors.shape[0] != n
            or (dim is not None and vectors.shape[1] != dim)):
        shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
        want = f"(N, {dim})" if dim is not None else "(N, D)"
        raise ValueError(f"ChunkIndex needs {want} vectors for N={n} texts, got {shape}.")
    if not bool(torch.isfinite(vectors).all()):
        bad = int((~torch.isfinite(vectors)).any(dim=1).nonzero()[0, 0])
        raise ValueError(f"chunk vector {bad} holds NaN or infinite values (the model that embedded it is "
                         "damaged or diverged); re-embed the texts with a sound model.")


def _embed(model: QNetwork, texts: list[str], batch_size: int | None, show: bool, precision: Precision,
           *, warn: bool = True) -> torch.Tensor:
    """(N, D) chunk-tower vectors of `texts` in `precision` (under the model's lock: a search may share the model);
    `warn`: a `ChunkLengthWarning` for texts the tower cuts (not when their later windows are embedded too)."""
    if warn:
        model.check_chunk_lengths(texts, stacklevel=3)
    with model_lock(model):
        if precision == "fp32":  # duck-typed models need not take a precision
            return model.embed_chunks(texts, batch_size=batch_size, show_progress=show)
        return model.embed_chunks(texts, batch_size=batch_size, show_progress=show, precision=precision)


def _check_cache_size(size: Any) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"mask_cache_size must be a whole number ≥ 0 (0 keeps no mask), got {size!r}.")


def _reads_windows(model: QNetwork) -> bool:
    """Whether long chunks get their later windows with this model: it embeds them, and scores without positions."""
    return callable(getattr(model, "embed_windows", None)) and model.config.position_mode == "none"


def _joined(old: Windows | None, new: Windows | None, offset: int, device: torch.device) -> Windows | None:
    """The windows after an add, where the index's vectors live: the index's, then the added rows' (their owners
    moved past the `offset` rows before them)."""
    if new is None:
        return old
    return (old if old is not None else Windows.empty(new.vectors.shape[1], device)).appended(new, offset)


def _check_windows(windows: Windows | None, n: int, dim: int) -> None:
    """Refuse windows whose vectors are not (W, dim) finite or whose owners are not rows of the n chunks."""
    if windows is None:
        return
    if not isinstance(windows, Windows):
        raise ValueError(f"windows must be a Windows (QNetwork.embed_windows), got {type(windows).__name__}.")
    if windows.vectors.shape[1] != dim:
        raise ValueError(f"window vectors must be (W, {dim}) like the chunk vectors, got {tuple(windows.vectors.shape)}.")
    if len(windows) and (int(windows.owner.min()) < 0 or int(windows.owner.max()) >= n):
        raise ValueError(f"window owners must be rows 0..{n - 1} of the chunks, got {int(windows.owner.min())}.."
                         f"{int(windows.owner.max())}.")
    if not bool(torch.isfinite(windows.vectors).all()):
        raise ValueError("a window vector holds NaN or infinite values; re-embed the texts with a sound model.")


def _check_long_chunks(long_chunks: Any) -> None:
    if long_chunks not in LONG_CHUNKS:
        raise ValueError(f"long_chunks must be one of {list(LONG_CHUNKS)}, got {long_chunks!r}.")
