"""Passages longer than the chunk tower reads, searched by their best window (docs/METHOD.md §4.6).

Shape legend: B states, N chunks, W windows, D vector dim.

The chunk tower reads `max_chunk_tokens` tokens (256 for the paragraph model); the vector of a chunk is that of its
first window. A longer chunk also gets the vectors of its later windows (`QNetwork.embed_windows`, rows from
`towers.window_rows`: `max_chunk_tokens` tokens, special tokens included, each starting half a window after the
one before, the last one ending at the text's end), and a state scores the chunk by its best window:
Q(s, c) = max over c's windows w of ⟨f(s), g(w)⟩. The chunk is still one row, one id and one result: only its score
sees the whole text. On validation text this ranks as the cut vector does where the answer is near the start and
finds what lies past it (docs/RESULTS.md, "Long passages").

`Windows` holds the later windows of an index's chunks: their vectors and the row of the chunk each belongs to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from qrag.training.model.config import Precision
from qrag.training.model.qnet import QNetwork, model_lock
from qrag.training.search.room import Room

__all__ = ["Windows", "best_window_scores"]

ROOM_MIN = 64  # spare window rows a buffer starts with


@dataclass(frozen=True)
class Windows:
    """The later windows of an index's chunks.

    Args:
        vectors: (W, D) unrotated chunk-tower vectors of the windows.
        owner: (W,) long, the row of the chunk each window belongs to, ascending.
    """

    vectors: torch.Tensor
    owner: torch.Tensor
    _room: Room | None = field(default=None, repr=False, compare=False)  # the buffer `vectors` and `owner` start

    def __post_init__(self) -> None:
        if self.vectors.dim() != 2 or self.owner.dim() != 1 or len(self.owner) != len(self.vectors):
            raise ValueError(f"windows need (W, D) vectors and (W,) owners, got {tuple(self.vectors.shape)} and "
                             f"{tuple(self.owner.shape)}.")
        if self.owner.dtype != torch.long:
            raise ValueError(f"window owners are row numbers (torch.long), got {self.owner.dtype}.")

    @classmethod
    def of(cls, model: QNetwork, texts: Sequence[str], *, batch_size: int | None = None, show_progress: bool = False,
           precision: Precision = "fp32") -> Windows:
        """The later windows of the `texts` longer than `model`'s chunk tower reads (`QNetwork.embed_windows`, under
        the model's lock: a search may share the model), owners counted over `texts`."""
        with model_lock(model):
            vectors, owner = model.embed_windows(list(texts), batch_size=batch_size, show_progress=show_progress,
                                                 precision=precision)
        return cls(vectors, owner.to(vectors.device))

    @classmethod
    def empty(cls, dim: int, device: torch.device | str = "cpu") -> Windows:
        return cls(torch.empty(0, dim, device=device), torch.empty(0, dtype=torch.long, device=device))

    def __len__(self) -> int:
        return len(self.owner)

    def to(self, device: torch.device | str) -> Windows:
        return Windows(self.vectors.to(device), self.owner.to(device))

    def appended(self, other: Windows, offset: int) -> Windows:
        """These windows, then `other`'s, whose owners are rows of chunks appended after the first `offset`.

        Written into the spare rows of these windows' buffer when they end where it is claimed (no copy of the rows
        before); otherwise into a new buffer with room for as many again (at least `ROOM_MIN` rows). The windows
        before the append are unchanged either way."""
        if not len(other):
            return self
        n, m = len(self), len(other)
        vectors = other.vectors.to(self.vectors)  # (m, D)
        owner = other.owner.to(self.owner.device) + offset  # (m,)
        if self._room is not None:
            views = self._room.appended(n, (vectors, owner))  # rows no earlier `Windows` reads
            if views is not None:
                return Windows(views[0], views[1], self._room)
        room = Room.holding((self.vectors, self.owner), (vectors, owner), max(ROOM_MIN, 2 * (n + m)))
        all_vectors, all_owner = room.views()
        return Windows(all_vectors, all_owner, room)

    def kept(self, keep: torch.Tensor) -> Windows:
        """The windows of the chunks `keep` (an (N,) bool mask over rows) keeps, owners renumbered to the kept rows."""
        keep = keep.to(self.owner.device)
        mine = keep[self.owner]  # (W,)
        new_row = torch.cumsum(keep.long(), 0) - 1  # (N,) a kept row's number after the deletion
        return Windows(self.vectors[mine], new_row[self.owner[mine]])


def best_window_scores(scores: torch.Tensor, window_scores: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """(B, N) scores where each chunk's is the best of its first window's (`scores`) and its later windows'.

    Args:
        scores: (B, N) the states' scores of every chunk's first window.
        window_scores: (B, W) the same states' scores of the later windows.
        owner: (W,) the chunk row of each later window.
    """
    if not len(owner):
        return scores
    index = owner.to(scores.device).unsqueeze(0).expand(scores.shape[0], -1)  # (B, W)
    return scores.scatter_reduce(1, index, window_scores.to(scores.dtype), reduce="amax", include_self=True)
