"""Buffers with spare rows, for index versions that grow by appending.

An append writes into the spare rows instead of copying the rows before (amortised O(added)), and never overwrites
rows an earlier version reads.

`used` rows are claimed: only a version that ends there may write past them, so two appends to one version give
the first its spare rows and the second a new buffer. The index's filter masks and its chunks' windows grow this way.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch


class Room:
    """Buffers of one length (their first dimension), the first `used` rows of each claimed.

    Args:
        buffers: The buffers, e.g. (capacity, D) vectors and (capacity,) owners.
        used: Rows claimed.
    """

    __slots__ = ("buffers", "lock", "used")

    def __init__(self, buffers: Sequence[torch.Tensor], used: int) -> None:
        self.buffers, self.used, self.lock = tuple(buffers), used, threading.Lock()

    @classmethod
    def holding(cls, olds: Sequence[torch.Tensor], news: Sequence[torch.Tensor], capacity: int) -> Room:
        """A new room of `capacity` rows holding each `olds[i]` then `news[i]` (moved to the old's device and dtype),
        all of them claimed."""
        buffers = []
        for old, new in zip(olds, news, strict=True):
            n, m = len(old), len(new)
            buffer = torch.empty((capacity, *old.shape[1:]), dtype=old.dtype, device=old.device)
            buffer[:n], buffer[n : n + m] = old, new.to(device=old.device, dtype=old.dtype)
            buffers.append(buffer)
        return cls(buffers, len(olds[0]) + len(news[0]))

    def views(self) -> tuple[torch.Tensor, ...]:
        """The claimed rows of each buffer."""
        return tuple(b[: self.used] for b in self.buffers)

    def appended(self, n: int, news: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        """Write `news[i]` after the first `n` rows of buffer i and claim them, when `n` rows are exactly what is
        claimed and the room has space; the claimed rows of each buffer then, else None (make a new room)."""
        m = len(news[0])
        with self.lock:
            if self.used != n or n + m > len(self.buffers[0]):
                return None
            for buffer, new in zip(self.buffers, news, strict=True):
                buffer[n : n + m] = new.to(device=buffer.device, dtype=buffer.dtype)
            self.used = n + m
            return self.views()


__all__ = ["Room"]
