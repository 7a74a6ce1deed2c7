"""The versions of a living `ChunkIndex`: the rows one version reads, its filter masks, its FAISS index.

Shape legend: N chunks, D vector dim.

A version is immutable. The versions that only added to one another share their growing parts, each reading its own
first `count` rows: the vector buffer (`with_room`: spare rows, amortised O(added)), the texts, ids and metadata
lists (`Rows`), the id lookup, and the FAISS index (`FaissRows`). Filter masks (`MaskCache`) carry to the next
version: an add leaves them to be extended by the added rows' bits, written into each mask's spare room; a delete
keeps the survivors' bits. Metadata is stored as the index's own copy and handed out as the caller's (`own_json`).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import numpy as np
import torch

from qrag.training.input_checks import check_metadatas
from qrag.training.search.lexical import LexicalIndex
from qrag.training.search.room import Room
from qrag.training.search.windows import Windows

T = TypeVar("T")
MASK_CACHE_SIZE = 64
"""Filter masks an index version keeps (least recently used dropped first): at most this many N-row bool masks,
64 × N bytes (6.4 MB at 100 000 chunks)."""


class Rows(Sequence[T]):
    """The first `count` items of a list that later versions of the index only append to: what a version's `texts`,
    `ids` and `metadatas` are (a read-only sequence; `list(...)` copies it). Comparing with a list compares items.
    `copy` makes what is handed out the caller's own (the metadata dicts: `own_json`), so no caller can change a
    stored item."""

    __slots__ = ("_copy", "_count", "_items")

    def __init__(self, items: list[T], count: int, copy: Callable[[T], T] | None = None) -> None:
        self._items, self._count, self._copy = items, count, copy

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            items = self._items[slice(*i.indices(self._count))]
            return items if self._copy is None else [self._copy(x) for x in items]
        j = i + self._count if i < 0 else i
        if not 0 <= j < self._count:
            raise IndexError(f"row {i} is outside this version's {self._count} chunks.")
        return self._items[j] if self._copy is None else self._copy(self._items[j])

    def __iter__(self) -> Iterator[T]:
        items = itertools.islice(self._items, self._count)
        return items if self._copy is None else map(self._copy, items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        mine = itertools.islice(self._items, self._count)
        return len(other) == self._count and all(a == b for a, b in zip(mine, other, strict=False))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({self._items[: min(self._count, 20)]!r:.200})"


def own_json(value: Any) -> Any:
    """A copy of JSON-like metadata whose lists and dicts are new all the way down: what the index keeps of what a
    caller passed, and what it hands out, so neither side's later edits reach the other."""
    if isinstance(value, dict):
        return {k: own_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(own_json(v) for v in value)
    return value


def own_metadatas(metadatas: Iterable[Mapping[str, Any]] | None, n: int) -> list[dict[str, Any]]:
    return [own_json(m) for m in check_metadatas(metadatas, n)]


class MaskCache:
    """The filter masks of one index version: an LRU of at most `size` bool masks, keyed by the filter's canonical
    text (`Filter.key`); thread-safe. A predicate has no key and is evaluated at every search.

    A mask covers the version's first rows, all of them once `ChunkIndex.mask` has read it: the next version starts
    with this one's masks (`carried`), so after an add the filter is evaluated on the added rows only (their bits
    written into the mask's spare room, `extended`), and after a delete the survivors keep their bits."""

    def __init__(self, size: int = MASK_CACHE_SIZE,
                 masks: Iterable[tuple[str, tuple[torch.Tensor, Room | None]]] = ()) -> None:
        self.size = size
        self._masks: OrderedDict[str, tuple[torch.Tensor, Room | None]] = OrderedDict(masks)
        self._lock = threading.Lock()

    def carried(self, keep: torch.Tensor | None = None) -> MaskCache:
        """The masks for the next version, least recently used first: after an add (`keep` None) these ones (they
        cover its first rows; the new rows are evaluated when a search asks), after a delete (`keep`: (N,) bool over
        this version's rows) the kept rows' bits of each."""
        with self._lock:
            masks = list(self._masks.items())
        if keep is not None:
            masks = [(key, (mask[keep[: len(mask)].to(mask.device)], None)) for key, (mask, _) in masks]
        return MaskCache(self.size, masks)

    def __len__(self) -> int:
        return len(self._masks)

    def get(self, key: str) -> torch.Tensor | None:
        """The mask of `key`, over the version's first rows (all of them, or those of the version it came from)."""
        with self._lock:
            entry = self._masks.get(key)
            if entry is None:
                return None
            self._masks.move_to_end(key)
            return entry[0]

    def put(self, key: str, mask: torch.Tensor, bits: Room | None = None) -> None:
        with self._lock:
            self._masks[key] = (mask, bits)
            self._masks.move_to_end(key)
            while len(self._masks) > self.size:
                self._masks.popitem(last=False)

    def extended(self, key: str, mask: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """`mask` (this cache's for `key`) then the bits `new` of the rows after it, kept for `key`: written into
        the mask's spare room when it ends where its buffer is claimed, else into a new buffer with room for an
        eighth more rows (at least 64)."""
        with self._lock:
            entry = self._masks.get(key)
        bits = entry[1] if entry is not None and entry[0] is mask else None
        n, m = len(mask), len(new)
        if bits is not None:
            views = bits.appended(n, (new,))
            if views is not None:
                self.put(key, views[0], bits)
                return views[0]
        room = Room.holding((mask,), (new,), n + m + max(64, (n + m) // 8))
        out = room.views()[0]
        self.put(key, out, room)
        return out


@dataclass(frozen=True, eq=False)
class Version:
    """One immutable state of a `ChunkIndex`. `rows` is shared between versions that only added to it (append-only:
    an id is this version's when its row is below `count` and names it here)."""

    storage: torch.Tensor  # (capacity, D): rows [0, count) are this version's vectors; later rows are the next's
    count: int
    all_texts: list[str]  # shared like `rows`: items [0, count) are this version's, later ones the next's
    all_ids: list[str]
    all_metadatas: list[dict[str, Any]]
    rows: dict[str, int]
    lexical: LexicalIndex | None
    masks: MaskCache
    lexical_shared: bool = False  # the BM25 index came from `corpus_lexical` (forgotten there when replaced)
    faiss: FaissRows = field(default_factory=lambda: FaissRows())  # shared with the versions it only added to
    windows: Windows | None = None  # the later windows of chunks longer than the chunk tower reads (windows.py)

    @property
    def vectors(self) -> torch.Tensor:
        return self.storage[: self.count]

    @property
    def texts(self) -> Rows[str]:
        return Rows(self.all_texts, self.count)

    @property
    def ids(self) -> Rows[str]:
        return Rows(self.all_ids, self.count)

    @property
    def metadatas(self) -> Rows[dict[str, Any]]:
        """The metadata dicts, each handed out as the caller's own copy."""
        return Rows(self.all_metadatas, self.count, own_json)

    @property
    def stored_metadatas(self) -> Rows[dict[str, Any]]:
        """The metadata dicts as stored: for the index's own reads (masks, saves), never handed to a caller."""
        return Rows(self.all_metadatas, self.count)

    def row(self, cid: str) -> int | None:
        r = self.rows.get(cid)
        return r if r is not None and r < self.count and self.all_ids[r] == cid else None


def with_room(vectors: torch.Tensor, rows: int) -> torch.Tensor:
    """A new buffer holding `vectors` in its first rows, with room for `rows` rows and an eighth more (at least 64):
    the adds that follow write into the spare rows instead of copying the index."""
    buffer = torch.empty((rows + max(64, rows // 8), vectors.shape[1]), dtype=vectors.dtype, device=vectors.device)
    buffer[: len(vectors)] = vectors
    return buffer


def faiss_module() -> Any:
    try:
        import faiss  # lazy: an optional dependency
    except ImportError:
        raise ImportError("backend='faiss' needs faiss: pip install 'qrag[faiss]' (or use backend='torch').") from None
    return faiss


class FaissRows:
    """A FAISS `IndexFlatIP` over the first rows of a vector buffer, shared by the versions that only added to one
    another (their rows below each one's count are the same): the first search that needs it builds it, a later
    version's first search adds the rows added since (O(added), no rebuild), and a version searches its own rows only
    (an id range). A delete or a move starts a new one. FAISS may move its storage while adding, so adding and
    searching take turns."""

    def __init__(self) -> None:
        self.index: Any = None
        self._lock = threading.Lock()

    def search(self, vectors: torch.Tensor, queries: Any, fetch: int) -> tuple[Any, Any]:
        """FAISS's (scores, rows) of `queries` (B, D) among `vectors` (N, D), the searching version's rows."""
        faiss, count = faiss_module(), len(vectors)
        with self._lock:
            if self.index is None:
                self.index = faiss.IndexFlatIP(int(vectors.shape[1]))
            have = int(self.index.ntotal)
            if have < count:
                self.index.add(np.ascontiguousarray(vectors[have:].detach().float().cpu().numpy()))  # (count - have, D)
            params = faiss.SearchParameters(sel=faiss.IDSelectorRange(0, count)) if have > count else None
            return self.index.search(queries, fetch, params=params)
