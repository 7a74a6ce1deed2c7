"""One writer at a time per vector store object in this process, and no search while it writes.

qrag's store paths check ids and then change the store (an added id must be new, a deleted one held): the two steps
hold the store's lock for writing, shared by every qrag wrapper over that same store object, so two adds of one id
cannot both pass the check (Chroma would keep the last). A search over the store holds it for reading from its first
hop to its last (`StoreLock.reading`): searches run side by side, a write waits for the searches under way and the
searches asked after it wait for the write. So a search never sees half an add (the store's rows and qrag's BM25 of
them apart), and once `delete` has returned no search returns the deleted id. Writers in other processes, or through
other objects over the same collection, are not covered: there the database must enforce unique ids itself.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any


class StoreLock:
    """A fair readers-writer lock: `with lock:` writes (one at a time, no reader inside), `with lock.reading():` reads
    (many at once). A waiting writer holds back readers that come after it, and a finished write lets in the readers
    that waited for it before the next writer: neither side starves under the other's steady stream. A thread that
    already reads may read again inside (a search inside a search never waits for a writer that waits for it)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._waiting_writers = 0
        self._waiting_readers = 0
        self._readers_turn = False  # a write just ended with readers waiting: they go before the next writer
        self._mine = threading.local()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the store for reading for the block."""
        depth = getattr(self._mine, "depth", 0)
        if depth == 0:
            with self._cond:
                self._waiting_readers += 1
                try:
                    while self._writing or (self._waiting_writers and not self._readers_turn):
                        self._cond.wait()
                finally:
                    self._waiting_readers -= 1
                self._readers += 1
                if not self._waiting_readers:
                    self._readers_turn = False  # every reader that waited for the write is in
                    self._cond.notify_all()
        self._mine.depth = depth + 1
        try:
            yield
        finally:
            self._mine.depth = depth
            if depth == 0:
                with self._cond:
                    self._readers -= 1
                    if not self._readers:
                        self._cond.notify_all()

    def __enter__(self) -> StoreLock:
        if getattr(self._mine, "depth", 0):
            raise RuntimeError("a write to this store was asked inside a search over it; write after the search.")
        with self._cond:
            self._waiting_writers += 1
            try:
                while self._writing or self._readers or self._readers_turn:
                    self._cond.wait()
            finally:
                self._waiting_writers -= 1
            self._writing = True
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._writing = False
            self._readers_turn = self._waiting_readers > 0
            self._cond.notify_all()


_LOCKS: dict[int, StoreLock] = {}
_REGISTRY = threading.Lock()


def writer_lock(store: Any) -> StoreLock:
    """The lock qrag's writers over `store` (this very object) hold from their check of ids to the change it guards,
    and its searches hold for reading (`StoreLock`).

    Keyed by the object's identity, as a LlamaIndex store (a pydantic model) cannot be hashed. The entry goes with
    the store (`weakref.finalize`, before its address can be reused); a store that cannot be weakly referenced keeps
    its lock for the life of the process, and an object later at its address shares it (a wait, never a wrong add).
    """
    key = id(store)
    with _REGISTRY:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = StoreLock()
            try:
                weakref.finalize(store, _LOCKS.pop, key, None)  # takes no lock: it may run inside this block
            except TypeError:
                pass  # no weak reference to it: its lock stays
        return lock


def refuse_held(ids: Sequence[str], held: Callable[[Sequence[str]], set[str]], where: str, instead: str) -> None:
    """Refuse an add of ids the store already holds (named; nothing is added). `where` names the store ("this
    Chroma store"), `instead` what to do ("add the texts under new ids")."""
    found = held(ids)
    taken = [i for i in ids if i in found]
    if taken:
        raise ValueError(f"ids {taken[:5]} are already in {where}; delete them first to replace them, or {instead}. "
                         "Nothing was added.")


def checked_delete(store: Any, ids: Sequence[str], held: Callable[[Sequence[str]], set[str]],
                   size: Callable[[], int | None], delete: Callable[[], None], where: str, noun: str) -> None:
    """Delete `ids` from `store` under its writer lock once they are checked: every id held (`held`), and not every
    document of the store (`size`, None where it cannot be told); `delete()` then changes the store (and what qrag
    keeps of it). Nothing is deleted when it raises.

    Raises:
        ValueError: an id the store does not hold (named), or a deletion that would empty the store.
    """
    with writer_lock(store):
        found = held(ids)
        missing = sorted({i for i in ids if i not in found})
        if missing:
            raise ValueError(f"ids {missing[:5]} are not in {where}; nothing was deleted.")
        count = size()
        if count is not None and ids and len(set(ids)) >= count:
            raise ValueError(f"cannot delete every {noun} of {where}; build a new one for a new corpus.")
        if ids:
            delete()


__all__ = ["StoreLock", "checked_delete", "refuse_held", "writer_lock"]
