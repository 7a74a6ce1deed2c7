"""A cheap stamp of a module's current weights, for the caches that hold what those weights computed.

They are the kept `f_0(q)`, the layers two towers share and the chunk tower's fingerprint.

Every in-place update through autograd's view of a tensor (an optimiser step, `load_state_dict`, `p.add_` under
`no_grad`) bumps its version counter; replacing a tensor (`module.to(dtype)`, a move to another device) gives it
another storage. An edit through `.data` bumps nothing, so the stamp also holds the first and last element of every
tensor: any edit that changes one of them is seen. An edit that leaves both as they were (a change to a few other
entries through `.data`) is not; after such an edit call `QNetwork.forget_kept()`.

A served pass reads the stamp, so it is kept to tens of microseconds for a MiniLM tower: the tensors are listed
once (`WatchedTensors`; walking a module's tree costs a millisecond), and on a CPU each element is read through a
NumPy view of the tensor's bits made at listing (one torch indexing op per tensor would cost milliseconds); on a GPU
the elements are gathered in one copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

Stamp = tuple[Any, ...]
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class WatchedTensors:
    """Tensors listed once (a module's `parameters()`), whose `stamp()` names their current values.

    Args:
        tensors: The tensors to watch.
    """

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self.tensors = [t for t in tensors if t.numel()]
        self._views: list[np.ndarray | None] = [_bits_view(t) for t in self.tensors]  # CPU: a view of the bits
        self._ptrs = [t.data_ptr() for t in self.tensors]  # the storage each view reads
        self._ends = _ends(self._views)  # each CPU view's first and last element, read in one concatenation

    def stamp(self) -> Stamp:
        """Each tensor's version and storage, and its first and last element (as bits). Two stamps of one
        `WatchedTensors` name the same weights when they are equal (the tensors listed never change)."""
        versions = tuple(t._version for t in self.tensors)
        ptrs = [t.data_ptr() for t in self.tensors]
        if ptrs != self._ptrs:  # a tensor was given another storage (`.to(dtype)`): view that one
            for i, (t, ptr) in enumerate(zip(self.tensors, ptrs, strict=True)):
                if ptr != self._ptrs[i]:
                    self._views[i], self._ptrs[i] = _bits_view(t), ptr
            self._ends = _ends(self._views)
        probed = np.concatenate(self._ends).tobytes() if self._ends else b""
        elsewhere = [t for t, view in zip(self.tensors, self._views, strict=True) if view is None]
        tail = b""
        if elsewhere:
            with torch.no_grad():
                gathered = [t.detach().reshape(-1)[[0, t.numel() - 1]].double() for t in elsewhere]
            device = gathered[0].device
            tail = torch.cat([g.to(device) for g in gathered]).cpu().numpy().tobytes()
        return (versions, tuple(ptrs), probed, tail)


def _ends(views: list[np.ndarray | None]) -> list[np.ndarray]:
    """One-element views of each view's first and last element, widened to 8 bytes by the concatenation."""
    return [end for view in views if view is not None for end in (view[:1], view[-1:])]


def _bits_view(t: torch.Tensor) -> np.ndarray | None:
    """A flat NumPy view of a contiguous CPU tensor's bits (an edit through `.data` shows in it); None elsewhere."""
    if t.device.type != "cpu" or not t.is_contiguous() or t.element_size() not in _BITS:
        return None
    with torch.no_grad():
        return t.detach().reshape(-1).view(_BITS[t.element_size()]).numpy()


__all__ = ["Stamp", "WatchedTensors"]
