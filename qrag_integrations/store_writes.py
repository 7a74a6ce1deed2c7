"""One writer at a time per vector store object in this process.

qrag's store paths check ids and then change the store (an added id must be new, a deleted one held): the two steps
hold one lock, shared by every qrag wrapper over that same store object, so two adds of one id cannot both pass the
check (Chroma would keep the last). Writers in other processes, or through other objects over the same collection,
are not covered: there the database must enforce unique ids itself.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

_LOCKS: dict[int, threading.Lock] = {}
_REGISTRY = threading.Lock()


def writer_lock(store: Any) -> threading.Lock:
    """The lock qrag's writers over `store` (this very object) hold from their check of ids to the change it guards.

    Keyed by the object's identity, as a LlamaIndex store (a pydantic model) cannot be hashed. The entry goes with
    the store (`weakref.finalize`, before its address can be reused); a store that cannot be weakly referenced keeps
    its lock for the life of the process, and an object later at its address shares it (a wait, never a wrong add).
    """
    key = id(store)
    with _REGISTRY:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = threading.Lock()
            try:
                weakref.finalize(store, _LOCKS.pop, key, None)  # takes no lock: it may run inside this block
            except TypeError:
                pass  # no weak reference to it: its lock stays
        return lock


__all__ = ["writer_lock"]
