"""Chunk positions and per-half rotary rotation (METHOD.md §2.3).

Shape legend: B batch (episodes or questions), N chunks, D vector dim (H = D // 2 per head half).

In `relative` mode the selected chunks cut the document into gaps; gap k holds the unselected chunks
after the k-th selected chunk (gap 0 = before the first). A chunk of rank j among the L chunks of its gap
sits at `p = 20·k + 18·j/(L−1)` (`20·k` when alone). Positions stay floats and are bounded by
`20·(steps+1)` whatever N is, which is why a model trained on 2K tokens runs unchanged at 10M.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from qrag.training.model.config import PositionMode as PositionMode  # the modes, named where the configs are

GAP_STRIDE = 20.0  # distance between the starts of consecutive gaps
GAP_SPAN = 18.0  # a gap's chunks spread over [20k, 20k + 18]
ROPE_BASE = 10000.0


def relative_positions(selected: torch.Tensor, valid: torch.Tensor | None = None,
                       num_gaps: int | None = None) -> torch.Tensor:
    """Relative gap positions of every chunk, in O(N).

    Args:
        selected: (B, N) bool, True where the chunk was already retrieved.
        valid: (B, N) bool, False on padding (episodes shorter than N); padding counts as no chunk.
        num_gaps: At least the number of gaps of any row (its selected chunks + 1), when the caller knows it: then
            nothing waits for the device to count them (on a GPU, one synchronisation less per hop).

    Returns:
        (B, N) float32 positions. Selected and padding entries get the position of their gap's start
        (they are masked out of every score, the value only keeps tensors finite).
    """
    sel = selected.bool()  # (B, N)
    avail = ~sel if valid is None else (~sel & valid.bool())  # (B, N) chunks that belong to a gap
    gap = torch.cumsum(sel.long(), dim=1)  # (B, N) number of selected chunks at or before i
    gap = gap - sel.long()  # (B, N) selected chunks strictly before i: the gap index k
    if num_gaps is None:
        num_gaps = int(gap.max().item()) + 1 if gap.numel() else 1
    sizes = gap_sizes(gap, avail, num_gaps, one_hot=sel.is_cuda)  # (B, G) L per gap
    starts = torch.cumsum(sizes, dim=1) - sizes  # (B, G) available chunks before each gap
    rank = torch.cumsum(avail.long(), dim=1) - 1 - starts.gather(1, gap)  # (B, N) j within the gap
    size = sizes.gather(1, gap)  # (B, N) L of the chunk's gap
    frac = torch.where(size > 1, rank.clamp(min=0).float() / (size - 1).clamp(min=1).float(), 0.0)  # (B, N)
    pos = GAP_STRIDE * gap.float() + GAP_SPAN * frac  # (B, N)
    return torch.where(avail, pos, GAP_STRIDE * gap.float())


def gap_sizes(gap: torch.Tensor, avail: torch.Tensor, num_gaps: int, *, one_hot: bool) -> torch.Tensor:
    """(B, G) available chunks per gap, from (B, N) gap indices and availability: a one-hot sum (`one_hot`, for a
    GPU, where a scatter-add into a handful of bins serialises its N atomic adds) or a scatter-add (a CPU's cheaper
    pass); the same integers."""
    if one_hot:
        return (torch.nn.functional.one_hot(gap, num_gaps) & avail.unsqueeze(-1)).sum(dim=1)  # (B, G)
    sizes = torch.zeros(gap.shape[0], num_gaps, dtype=torch.long, device=gap.device)  # (B, G)
    return sizes.scatter_add_(1, gap, avail.long())


def absolute_positions(num_chunks: int, batch: int = 1, device: torch.device | None = None) -> torch.Tensor:
    """(B, N) positions equal to the chunk index (the optional `absolute` mode)."""
    return torch.arange(num_chunks, device=device, dtype=torch.float32).expand(batch, num_chunks)


def rope_frequencies(half_dim: int, device: torch.device | None = None) -> torch.Tensor:
    """θ_m = 10000^(−2m/H) for m = 0 … H/2−1, as (H/2,) float32."""
    if half_dim % 2:
        raise ValueError(f"rotary positions need an even half dimension, got {half_dim} (vector dim {2 * half_dim}).")
    m = torch.arange(half_dim // 2, device=device, dtype=torch.float32)  # (H/2,)
    return ROPE_BASE ** (-2.0 * m / half_dim)


def rotate_halves(vectors: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate each half of the chunk vectors by RoPE angles `p·θ_m` (the same angles for both halves).

    Within a half of size H, dimension m pairs with m + H/2 (the "rotate-half" layout).

    Args:
        vectors: (..., N, D) chunk vectors (D divisible by 4). A (N, D) tensor broadcasts against a
            (B, N) position tensor.
        positions: (..., N) float positions.

    Returns:
        (..., N, D) rotated vectors in the vectors' dtype; angles are computed in float32.
    """
    d = vectors.shape[-1]
    half = d // 2
    freqs = rope_frequencies(half, device=vectors.device)  # (H/2,)
    angles = positions.float().unsqueeze(-1) * freqs  # (..., N, H/2)
    cos, sin = angles.cos(), angles.sin()  # (..., N, H/2)
    x = vectors.float().unflatten(-1, (2, 2, half // 2))  # (..., N, head, pair, H/2)
    x1, x2 = x[..., 0, :], x[..., 1, :]  # (..., N, head, H/2) each
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # (..., N, 1, H/2) shared by both heads
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-2)  # (..., N, head, pair, H/2)
    return out.flatten(-3).to(vectors.dtype)


FUSED_MIN_CHUNKS = 16384
"""From this many chunks on, gradient-free rotary scores run as one compiled pass (`fused_rotary_scores`)."""
_FUSED: dict[str, Any] = {}  # the compiled kernel, or the reason it is off in this process
ROTATE_BUDGET = 1 << 25
"""Elements of (rows, N, D) rotary-scoring temporaries the eager form builds at once (128 MiB fp32): it scores the
state rows in slices of that size, so 64 questions over 400 000 chunks never hold tens of GB at once."""


def budget_rows(num_chunks: int, dim: int) -> int:
    """How many state rows' (rows, N, D) rotary temporaries fit in `ROTATE_BUDGET` elements (at least one)."""
    return max(1, ROTATE_BUDGET // max(1, num_chunks * dim))


def rotary_scores(states: torch.Tensor, chunks: torch.Tensor, positions: torch.Tensor, heads: bool = False) -> torch.Tensor:
    """⟨state, R(p)·chunk⟩ for every state and chunk, without building the rotated chunks.

    Per head and frequency m, with (x1, x2) a chunk's pair and (s1, s2) the state's:
    ⟨s, R(p)x⟩ = cos(p·θ_m)·(s1·x1 + s2·x2) + sin(p·θ_m)·(s2·x1 − s1·x2). The two brackets are products with
    the unrotated chunks, so no rotated (B, N, D) copy is built. Equal to `rotate_halves` followed by inner products
    up to float rounding.

    Over `FUSED_MIN_CHUNKS` chunks or more, without gradients, the sum runs as one compiled pass over the chunk
    vectors (`fused_rotary_scores`: torch.compile, a C++/OpenMP loop on a CPU, a Triton kernel on a GPU), the
    angles, cosines and sines computed in registers: about one plain inner-product pass over the same vectors
    (docs/RESULTS.md, "Position-aware scoring"). Where it cannot compile (no C++ compiler, `QRAG_FUSED_SCORES=0`),
    the eager form below serves, with a warning once, over slices of rows of `ROTATE_BUDGET` temporaries.

    Args:
        states: (B, D) state vectors.
        chunks: (N, D) chunk vectors shared by the batch, or (B, N, D) per state.
        positions: (B, N) float positions.
        heads: return the two heads' values apart.

    Returns:
        (B, N) Q-values, or (2, B, N) per head.
    """
    grad = torch.is_grad_enabled() and (states.requires_grad or chunks.requires_grad)
    if not grad and chunks.shape[-2] >= FUSED_MIN_CHUNKS:
        kernel = _fused_kernel()
        if kernel is not None:
            try:
                per_head = kernel(states.float(), chunks.float(), positions.float(), rope_frequencies(
                    states.shape[-1] // 2, device=states.device))  # (2, B, N)
                return per_head if heads else per_head.sum(dim=0)
            except Exception as e:  # noqa: BLE001 - a compiler or backend failure: the eager form is exact too
                _fused_off(f"its compiled pass failed ({type(e).__name__}: {str(e)[:200]})")
    return _eager_rotary_scores(states, chunks, positions, heads)


def _eager_rotary_scores(states: torch.Tensor, chunks: torch.Tensor, positions: torch.Tensor,
                         heads: bool) -> torch.Tensor:
    """The eager form over slices of state rows that keep `ROTATE_BUDGET` elements of temporaries each (every
    row at once when they fit): what serves where the compiled pass is off or has failed."""
    step = budget_rows(chunks.shape[-2], states.shape[-1])
    if states.shape[0] <= step:
        return _eager_rotary_block(states, chunks, positions, heads)
    parts = [_eager_rotary_block(states[i : i + step], chunks if chunks.dim() == 2 else chunks[i : i + step],
                                 positions[i : i + step], heads) for i in range(0, states.shape[0], step)]
    return torch.cat(parts, dim=-2)  # (B, N) | (2, B, N)


def _eager_rotary_block(states: torch.Tensor, chunks: torch.Tensor, positions: torch.Tensor,
                        heads: bool) -> torch.Tensor:
    half = states.shape[-1] // 2
    freqs = rope_frequencies(half, device=states.device)  # (H/2,)
    angles = positions.float().unsqueeze(-1) * freqs  # (B, N, H/2)
    s = states.unflatten(-1, (2, 2, half // 2))  # (B, head, pair, H/2)
    turned = torch.stack((s[:, :, 1], -s[:, :, 0]), dim=2)  # (B, head, pair, H/2): (s2, −s1)
    x = chunks.unflatten(-1, (2, 2, half // 2))  # (N | B, N, head, pair, H/2)
    if x.dim() == 4:
        x = x.unsqueeze(0)  # (1, N, head, pair, H/2)
    along = (x * s.unsqueeze(1)).sum(dim=-2)  # (B, N, head, H/2): s1·x1 + s2·x2
    across = (x * turned.unsqueeze(1)).sum(dim=-2)  # (B, N, head, H/2): s2·x1 − s1·x2
    per_head = (along * angles.cos().unsqueeze(-2) + across * angles.sin().unsqueeze(-2)).sum(dim=-1)  # (B, N, head)
    return per_head.movedim(-1, 0) if heads else per_head.sum(dim=-1)


def fused_rotary_scores(states: torch.Tensor, chunks: torch.Tensor, positions: torch.Tensor,
                        freqs: torch.Tensor) -> torch.Tensor:
    """(2, B, N) per-head rotary scores as elementwise arithmetic and one reduction over the frequencies: the form
    torch.compile fuses into one loop per (state, chunk), reading each chunk vector once.

    Args:
        states: (B, D) float32.
        chunks: (N, D) float32, or (B, N, D) per state.
        positions: (B, N) float32.
        freqs: (H/2,) the rotary frequencies θ_m.
    """
    b, d = states.shape
    q = d // 4
    angles = positions.unsqueeze(-1) * freqs  # (B, N, H/2)
    cos, sin = angles.cos(), angles.sin()  # (B, N, H/2) each
    x = chunks.reshape(-1, chunks.shape[-2], 2, 2, q)  # (1 | B, N, head, pair, H/2)
    s = states.reshape(b, 1, 2, 2, q)  # (B, 1, head, pair, H/2)
    x1, x2, s1, s2 = x[:, :, :, 0], x[:, :, :, 1], s[:, :, :, 0], s[:, :, :, 1]  # (·, ·, head, H/2) each
    along = x1 * s1 + x2 * s2  # (B, N, head, H/2)
    across = x1 * s2 - x2 * s1  # (B, N, head, H/2)
    per_head = (along * cos.unsqueeze(2) + across * sin.unsqueeze(2)).sum(dim=-1)  # (B, N, head)
    return per_head.movedim(-1, 0)  # (2, B, N)


def fused_scoring(num_chunks: int) -> bool:
    """Whether gradient-free rotary scores over `num_chunks` chunks take the compiled one-pass form (no (B, N, D)
    temporaries: every state row can be scored at once)."""
    return num_chunks >= FUSED_MIN_CHUNKS and "off" not in _FUSED and os.environ.get("QRAG_FUSED_SCORES", "1") != "0"


def _fused_kernel() -> Any:
    """The compiled `fused_rotary_scores`, built once per process; None where it is off."""
    if "kernel" not in _FUSED and "off" not in _FUSED:
        if os.environ.get("QRAG_FUSED_SCORES", "1") == "0":
            _FUSED["off"] = "QRAG_FUSED_SCORES=0"
        else:
            _FUSED["kernel"] = torch.compile(fused_rotary_scores, dynamic=True)
    return _FUSED.get("kernel")


@contextmanager
def eager_scoring() -> Iterator[None]:
    """Within it, rotary scores take the eager form in this process (to time or check it beside the served one);
    on leaving, the compiled pass, or the reason it is off, is back as it was."""
    held = dict(_FUSED)
    _FUSED.clear()
    _FUSED["off"] = "the eager form was asked for"
    try:
        yield
    finally:
        _FUSED.clear()
        _FUSED.update(held)


def _fused_off(reason: str) -> None:
    """Serve the eager form from now on in this process, and say why once."""
    _FUSED.pop("kernel", None)
    _FUSED["off"] = reason
    warnings.warn(f"position-aware scoring runs its eager form (several passes over the chunk vectors) because "
                  f"{reason}; it gives the same Q-values, more slowly. A C++ compiler (gcc or clang) on the PATH lets "
                  "torch.compile build the one-pass form.", RuntimeWarning, stacklevel=3)
