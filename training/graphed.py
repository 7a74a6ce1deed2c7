"""State passes replayed as CUDA graphs: a served hop on a GPU without the per-operation launch cost.

A hop's state pass is a few dozen tokens through a small encoder: on a GPU its time is the launches of a few hundred
kernels (and the Python between them), not their arithmetic. `GraphedPass` captures the gradient-free pass once per
padded shape, (rows, tokens) rounded up to powers of two (at least 16 tokens), all shapes sharing one memory pool,
and replays it: the inputs are copied into the graph's own tensors, padded with the pad id and a zero attention
mask (a padding row attends to its first token only, so nothing divides by zero), and the real rows are read back.
Padding under the attention mask leaves the mean-pooled vectors as they were, up to float rounding (tested).

Serving only: `QNetwork.serve_graphed()` turns it on (`load_model` does on a GPU; `QRAG_CUDA_GRAPHS=0` keeps every
pass eager), training never replays a graph, and a shape whose capture fails runs eagerly from then on, with one
warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

Inputs = dict[str, torch.Tensor]
MIN_TOKENS = 16


def fill_padded(static: Inputs, inputs: Inputs, pad_id: int) -> Inputs:
    """Copy (B, L) `inputs` into the larger (B', L') `static` tensors, the rest padded: pad ids, and an attention
    mask of zeros but for each padding row's first token. Returns `static`."""
    b, n = inputs["input_ids"].shape
    static["input_ids"].fill_(pad_id)
    static["attention_mask"].zero_()
    static["attention_mask"][:, 0] = 1
    static["input_ids"][:b, :n].copy_(inputs["input_ids"])
    static["attention_mask"][:b, :n].copy_(inputs["attention_mask"])
    return static


def bucket(n: int, minimum: int = 1) -> int:
    """The power of two at or above max(n, minimum)."""
    return 1 << max(0, (max(n, minimum) - 1).bit_length())


class GraphedPass:
    """`fn(inputs) -> (B, D)` replayed from a CUDA graph per padded (rows, tokens) shape (module docstring).

    Args:
        fn: The gradient-free pass, e.g. `QNetwork.state_vectors`.
        pad_id: The tokenizer's pad id.
    """

    def __init__(self, fn: Callable[[Inputs], torch.Tensor], pad_id: int) -> None:
        self.fn, self.pad_id = fn, pad_id
        self._graphs: dict[tuple[int, int, bool, torch.dtype], tuple[torch.cuda.CUDAGraph, Inputs, torch.Tensor]] = {}
        self._pool: object = None
        self.broken: str | None = None

    def __call__(self, inputs: Inputs) -> torch.Tensor:
        ids = inputs["input_ids"]  # (B, L)
        if self.broken is not None or ids.device.type != "cuda" or torch.is_grad_enabled():
            return self.fn(inputs)
        b, n = ids.shape
        key = (bucket(b), bucket(n, MIN_TOKENS), torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
        if key not in self._graphs:
            try:
                self._graphs[key] = self._capture(key[0], key[1], ids.device)
            except Exception as e:  # noqa: BLE001 - a pass that cannot be captured runs eagerly, as before
                self.broken = f"{type(e).__name__}: {str(e)[:200]}"
                warnings.warn(f"state passes run eagerly on this GPU: capturing a CUDA graph failed ({self.broken}); "
                              "the vectors are the same, only slower (QRAG_CUDA_GRAPHS=0 skips the attempt).",
                              RuntimeWarning, stacklevel=2)
                return self.fn(inputs)
        graph, static, out = self._graphs[key]
        fill_padded(static, inputs, self.pad_id)
        graph.replay()
        return out[:b].clone()  # (B, D): the graph's output is overwritten by the next replay

    def _capture(self, rows: int, tokens: int, device: torch.device) -> tuple[torch.cuda.CUDAGraph, Inputs, torch.Tensor]:
        static = {"input_ids": torch.full((rows, tokens), self.pad_id, dtype=torch.long, device=device),
                  "attention_mask": torch.zeros(rows, tokens, dtype=torch.long, device=device)}
        static["attention_mask"][:, 0] = 1
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up passes off the default stream, as capture requires
            for _ in range(2):
                self.fn(static)
        torch.cuda.current_stream(device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):  # type: ignore[arg-type]
            out = self.fn(static)  # (rows, D)
        return graph, static, out
