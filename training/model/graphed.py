"""State passes replayed as CUDA graphs: a served hop on a GPU without the per-operation launch cost.

A hop's state pass is a few dozen tokens through a small encoder: on a GPU its time is the launches of a few hundred
kernels (and the Python between them), not their arithmetic. `GraphedPass` captures the gradient-free pass once per
padded shape, (rows, tokens) rounded up to powers of two (at least 16 tokens), all shapes sharing one memory pool,
and replays it: the inputs are copied into the graph's own tensors, padded with the pad id and a zero attention
mask (a padding row attends to its first token only, so nothing divides by zero), and the real rows are read back.
Padding under the attention mask leaves the mean-pooled vectors as they were, up to float rounding (tested).

Each captured shape has one set of input and output tensors, so a fill, its replay and the read-back of the real
rows hold that shape's lock: concurrent passes of one shape (the state batcher runs several at once) take turns
through it, and each caller reads its own rows, never another's. Passes of different shapes replay side by side;
capturing holds a lock of its own.

Serving only: `QNetwork.serve_graphed()` turns it on (`load_model` does on a GPU; `QRAG_CUDA_GRAPHS=0` keeps every
pass eager), training never replays a graph, and a shape whose capture fails runs eagerly from then on, with one
warning.
"""

from __future__ import annotations

import threading
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


Replay = Callable[[], None]


class _Graph:
    """One captured shape: its replay, the input tensors it reads, the output it writes, and the lock that makes a
    fill, its replay and the read-back one step."""

    def __init__(self, replay: Replay, inputs: Inputs, output: torch.Tensor) -> None:
        self.replay, self.inputs, self.output = replay, inputs, output
        self.lock = threading.Lock()


class GraphedPass:
    """`fn(inputs) -> (B, D)` replayed from a CUDA graph per padded (rows, tokens) shape (module docstring).

    Args:
        fn: The gradient-free pass, e.g. `QNetwork.state_vectors`.
        pad_id: The tokenizer's pad id.
    """

    device_type = "cuda"  # where passes are captured; on any other device the plain pass runs

    def __init__(self, fn: Callable[[Inputs], torch.Tensor], pad_id: int) -> None:
        self.fn, self.pad_id = fn, pad_id
        self._graphs: dict[tuple[int, int, bool, torch.dtype], _Graph] = {}
        self._pool: object = None
        self._capturing = threading.Lock()  # one capture at a time (they share the memory pool)
        self.broken: str | None = None

    def __call__(self, inputs: Inputs) -> torch.Tensor:
        ids = inputs["input_ids"]  # (B, L)
        if self.broken is not None or ids.device.type != self.device_type or torch.is_grad_enabled():
            return self.fn(inputs)
        b, n = ids.shape
        key = (bucket(b), bucket(n, MIN_TOKENS), torch.is_autocast_enabled(self.device_type),
               torch.get_autocast_dtype(self.device_type))
        graph = self._graphs.get(key)
        if graph is None:
            with self._capturing:
                graph = self._graphs.get(key)
                if graph is None and self.broken is None:
                    try:
                        graph = _Graph(*self._capture(self._static(key[0], key[1], ids.device)))
                    except Exception as e:  # noqa: BLE001 - a pass that cannot be captured runs eagerly, as before
                        self.broken = f"{type(e).__name__}: {str(e)[:200]}"
                        warnings.warn(f"state passes run eagerly on this GPU: capturing a CUDA graph failed "
                                      f"({self.broken}); the vectors are the same, only slower (QRAG_CUDA_GRAPHS=0 "
                                      "skips the attempt).", RuntimeWarning, stacklevel=2)
                    else:
                        self._graphs[key] = graph
            if graph is None:
                return self.fn(inputs)
        with graph.lock:  # the shape's one set of buffers: fill, replay and read back as one step
            fill_padded(graph.inputs, inputs, self.pad_id)
            graph.replay()
            return graph.output[:b].clone()  # (B, D): the graph's output is overwritten by the next replay

    def _static(self, rows: int, tokens: int, device: torch.device) -> Inputs:
        """The (rows, tokens) input tensors a graph reads, every row padding until `fill_padded` writes them."""
        static = {"input_ids": torch.full((rows, tokens), self.pad_id, dtype=torch.long, device=device),
                  "attention_mask": torch.zeros(rows, tokens, dtype=torch.long, device=device)}
        static["attention_mask"][:, 0] = 1
        return static

    def _capture(self, static: Inputs) -> tuple[Replay, Inputs, torch.Tensor]:
        """(replay, its inputs, its output): the pass over `static` captured as a CUDA graph."""
        device = static["input_ids"].device
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
        return graph.replay, static, out


class RerunPass(GraphedPass):
    """`GraphedPass`'s twin on a CPU, for tests that run anywhere: the same buckets, input tensors, padding and
    read-back, its 'graph' a re-run of the pass over the captured inputs written into the captured output (what a
    replay does). Not for serving: it saves nothing."""

    device_type = "cpu"

    def _capture(self, static: Inputs) -> tuple[Replay, Inputs, torch.Tensor]:
        out = self.fn(static)  # (rows, D)

        def replay() -> None:
            out.copy_(self.fn(static))

        return replay, static, out
