"""Gradient-free CPU passes of an encoder through ONNX Runtime: the same vectors at a fraction of eager torch's cost.

A served query runs four short encoder passes (docs/METHOD.md §4.2: `f_θ(q)`, `f_0(q)`, `f_θ(s)`, `f_0(s)` under the
state anchor), one row each. Eager torch spends much of such a pass outside its arithmetic (a few hundred operator
calls); ONNX Runtime runs the same graph with its kernels fused. On a 2-core AMD EPYC (avx2 avx512f avx512_bf16
avx512_vnni), one thread, base MiniLM: a 20-token pass 7.6 ms against 17.8, an 86-token one 26.1 against 37.9, the
same hidden states within 4e-6 (docs/RESULTS.md, "The paragraph model's price", measures a whole query).

`CPUEngine.build(encoder)` exports the encoder in memory (torch's TorchScript ONNX exporter, opset 17, batch and
length dynamic), opens an ONNX Runtime session at torch's intra-op thread count, and checks the session against the
encoder on a padded batch; it returns None, with the reason, where `onnxruntime` or `onnx` is missing, the export
fails or the two disagree. Sessions are kept per process by a digest of the encoder's weights, and the exported
graphs on disk under that digest (`cache_dir()/onnx`, `qrag.training.caches`; written atomically, versioned by torch,
ONNX Runtime and the export), so a checkpoint loaded again is not exported again; a cached graph that will not open
or fails the check is exported afresh over it.

`CPUEngine.build(encoder, int8=True)` is the serving precision 'int8' (`QNetwork.serve_in`): the exported graph's
matrix products get int8 weights, one scale per output channel, their inputs quantised per pass to uint8 (ONNX
Runtime's dynamic quantisation). About half fp32's time a pass, vectors at cosine ~0.99 to fp32's; its check is on
the pooled vectors of the padded batch (`INT8_MIN_COSINE`), not on each hidden state. The weights' width follows
the CPU (`int8_weight_bits`): a VNNI or AMX CPU sums each product into 32 bits, but an x86 CPU without them (AVX2
only, or AVX-512 without VNNI) adds two neighbouring uint8 x int8 products into 16 bits first, which saturates
beyond ±32 767 (255 · 127 · 2 = 64 770); weights cut to 7 bits ([-64, 64]) keep every such pair sum in range (at most
32 640), so the integers an AVX2 CPU computes are exactly those a VNNI CPU computes from the same 7-bit graph. `Tower.forward` runs the engine only for a gradient-free pass of a CPU batch in
eval mode outside autocast; a pass after the encoder's weights changed (`weight_stamp`) is torch's, and the tower
drops the engine. `QRAG_CPU_ENGINE=torch` keeps every pass in torch.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from qrag.training.atomic import write_bytes_atomic
from qrag.training.caches import cache_dir
from qrag.training.model import precision
from qrag.training.model.towers import eval_mode, tensors_digest
from qrag.training.model.weight_stamp import WatchedTensors

ENV = "QRAG_CPU_ENGINE"
CACHE_ENV = "QRAG_ONNX_CACHE"
"""Where exported graphs are cached: a folder, or '0' for none on disk (each process exports its own); unset:
`cache_dir()/onnx`."""
OPSET = 17
CHECK_ATOL = 1e-4
"""The largest difference from torch's hidden states (on real tokens) the build check accepts."""
INT8_MIN_COSINE = 0.98
"""The lowest cosine between an int8 session's and torch's mean-pooled vectors of the check batch it accepts."""
INT8_WEIGHTS_ENV = "QRAG_INT8_WEIGHTS"
"""The int8 graph's weight width: '8' or '7' bits; unset: `int8_weight_bits`' choice for this CPU."""
INT32_DOT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""/proc/cpuinfo flags of x86 CPUs whose int8 dot products sum into 32 bits (VNNI, AMX): 8-bit weights are exact."""
EXPORT_VERSION = 1
"""Bumped whenever `_export` or `_quantized` write another graph: graphs cached by an earlier version are not read."""
KEPT_SESSIONS = 4
"""Sessions kept per process (each holds a copy of its encoder's weights, prepacked: a MiniLM fp32 session about 115 MB
resident, measured on one thread)."""
SHRINK_TOKENS = 4096
"""A pass over more tokens than this (rows × length: an indexing batch, not a query) hands its working memory back
to the system when it ends (ONNX Runtime's arena shrinkage). A session's memory arena otherwise keeps the largest
pass it ever ran: 400 summaries indexed left a process at 3.59 GB resident, against 1.43 GB shrinking, in the same
time (docs/RESULTS.md, "Memory"); one 64 × 200-token pass alone takes about 7 % longer, a query's nothing."""

_SESSIONS: OrderedDict[tuple[str, int, int | None], Any] = OrderedDict()
_SESSIONS_LOCK = threading.Lock()


def int8_weight_bits() -> int:
    """The width of the int8 graph's weights here: 8 bits, or 7 on an x86 CPU without `INT32_DOT_FLAGS`, whose
    integer kernels saturate 16-bit pair sums of 8-bit weights (module docstring); `INT8_WEIGHTS_ENV` overrides.

    Raises:
        ValueError: any other value of `INT8_WEIGHTS_ENV`.
    """
    chosen = os.environ.get(INT8_WEIGHTS_ENV, "").strip()
    if chosen:
        if chosen not in ("7", "8"):
            raise ValueError(f"{INT8_WEIGHTS_ENV}={chosen!r} is not a weight width: set it to '8' or '7' (bits), or "
                             "unset it to let the CPU choose.")
        return int(chosen)
    return 7 if precision.is_x86() and not precision.cpu_flags() & set(INT32_DOT_FLAGS) else 8


def wanted() -> bool:
    """Whether CPU passes may run through ONNX Runtime (`QRAG_CPU_ENGINE`: 'onnx', the default, or 'torch').

    Raises:
        ValueError: any other value of `QRAG_CPU_ENGINE`.
    """
    choice = os.environ.get(ENV, "").strip().lower() or "onnx"
    if choice not in ("onnx", "torch"):
        raise ValueError(f"{ENV}={os.environ[ENV]!r} is not a CPU engine: set it to 'onnx' (ONNX Runtime, the "
                         "default) or 'torch' (eager torch), or unset it.")
    return choice == "onnx"


class _HiddenStates(nn.Module):
    """The encoder as the exporter sees it: (input_ids, attention_mask) → last hidden state (B, L, H)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _export(encoder: nn.Module) -> bytes:
    """The encoder as an ONNX model (bytes), batch and length dynamic."""
    ids = torch.ones(1, 8, dtype=torch.long)
    buffer = io.BytesIO()
    dynamic = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
               "hidden": {0: "batch", 1: "tokens"}}
    # traced with gradients on: a gradient-free pass takes oneDNN's linear (`cpu_linear`), an op the exporter lacks
    with warnings.catch_warnings(), torch.enable_grad():
        warnings.simplefilter("ignore")  # the tracer's and the exporter's notices about a graph it exports as asked
        # the wrapper in eval mode: the exporter puts back the mode it found, over every submodule (the encoder's)
        torch.onnx.export(_HiddenStates(encoder).eval(), (ids, torch.ones_like(ids)), buffer,  # type: ignore[arg-type]
                          input_names=["input_ids", "attention_mask"], output_names=["hidden"], dynamic_axes=dynamic,
                          opset_version=OPSET, dynamo=False)  # the TorchScript exporter writes to any file object
    return buffer.getvalue()


def _quantized(model: bytes, bits: int) -> bytes:
    """The exported model with its MatMuls' weights in int8 of `bits` bits (8, or 7: [-64, 64]), per output channel
    (activations quantised per pass)."""
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="qrag-int8-") as folder:  # the quantiser reads and writes files
        fp32, int8 = Path(folder, "fp32.onnx"), Path(folder, "int8.onnx")
        fp32.write_bytes(model)
        advice = _Advice()  # the quantiser logs, to the root logger, its advice to run a pre-processing pass first
        logging.getLogger().addFilter(advice)
        try:
            quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"],
                             reduce_range=bits == 7)
        finally:
            logging.getLogger().removeFilter(advice)
        return int8.read_bytes()


class _Advice(logging.Filter):
    """Drops the quantiser's advice to pre-process the graph (a shape-inference pass it does not need here)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing")


def _session(model: bytes, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep: callers share cores
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


@functools.lru_cache(maxsize=1)
def _shrinking() -> Any:
    """Run options that shrink the CPU arena back when the run ends (`SHRINK_TOKENS`)."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def _numpy(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().to(torch.int64).numpy())


class CPUEngine:
    """An ONNX Runtime session running one encoder's gradient-free CPU passes (module docstring).

    Args:
        encoder: The encoder it was exported from (watched: a pass after its weights change returns None).
        digest: The digest of the encoder's weights the session is kept under.
        session: The session, at `threads` intra-op threads.
        weight_bits: The int8 graph's weight width the session runs (`precision` 'int8'; 8 or 7 bits), or None: the
            fp32 graph.
    """

    def __init__(self, encoder: nn.Module, digest: str, session: Any, threads: int,
                 weight_bits: int | None = None) -> None:
        self._encoder = encoder
        self._digest = digest
        self._bits = weight_bits
        self._watched = WatchedTensors(list(encoder.parameters()) + list(encoder.buffers()))
        self._stamp = self._watched.stamp()
        self._sessions = {threads: session}
        self._lock = threading.Lock()
        self.listeners: list[Callable[[torch.Tensor], None]] = []  # called with each pass's input ids (B, L)

    @property
    def encoder(self) -> nn.Module:
        """The encoder the engine was exported from."""
        return self._encoder

    @property
    def precision(self) -> str:
        """'int8' or 'fp32': the arithmetic of the engine's matrix products."""
        return "fp32" if self._bits is None else "int8"

    @property
    def weight_bits(self) -> int | None:
        """The int8 graph's weight width (8, or 7 on an x86 CPU without VNNI: `int8_weight_bits`); None for fp32."""
        return self._bits

    @classmethod
    def build(cls, encoder: nn.Module, *, int8: bool = False) -> tuple[CPUEngine | None, str]:
        """(the engine, why) for `encoder`'s CPU passes, or (None, why not); `int8`: the int8 graph (module
        docstring)."""
        try:
            import onnx  # noqa: F401  # the exporter writes through it
            import onnxruntime  # noqa: F401
        except ImportError as e:
            return None, f"ONNX Runtime is not installed ({e.name}): passes run in torch"
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in encoder.parameters()):
            return None, "the encoder's weights are not fp32 on the CPU: passes run in torch"
        threads = torch.get_num_threads()
        bits = int8_weight_bits() if int8 else None
        digest = tensors_digest(sorted(encoder.state_dict().items()), "blake2b", 32, prefix=type(encoder).__name__)
        for fresh in (False, True):  # a graph read from the cache, then one exported now where that one fails the check
            cached = False
            try:
                session, cached = _kept(digest, threads, encoder, bits, fresh=fresh)
                engine = cls(encoder, digest, session, threads, bits)
                error = engine._check()
            except Exception as e:  # an encoder the exporter cannot trace, or a session that will not open
                error = f"the encoder did not export to ONNX ({type(e).__name__}: {e}): passes run in torch"
            if error is None or not cached:
                break
        if error is not None:
            return None, error
        kind = "" if bits is None else f" in int8 (per-channel {bits}-bit weights)"
        return engine, f"ONNX Runtime{kind} at {threads} intra-op threads"

    def release(self) -> None:
        """Take this engine's sessions out of the process's kept ones (`KEPT_SESSIONS`): the engine still runs, and
        its last reference dropped frees them (a network serving from a low-precision copy parks its fp32 state
        engine so)."""
        with _SESSIONS_LOCK:
            for threads, session in self._sessions.items():
                key = (self._digest, threads, self._bits)
                if _SESSIONS.get(key) is session:
                    del _SESSIONS[key]

    def _check(self) -> str | None:
        """Why the session disagrees with torch on a padded batch (fp32: a hidden state more than `CHECK_ATOL` away;
        int8: a pooled vector below `INT8_MIN_COSINE`), else None."""
        gen = torch.Generator().manual_seed(0)
        vocab = int(getattr(getattr(self._encoder, "config", None), "vocab_size", 100) or 100)
        ids = torch.randint(1, max(vocab, 2), (2, 12), generator=gen)
        mask = torch.ones_like(ids)
        mask[1, 7:] = 0
        with torch.no_grad(), eval_mode(self._encoder):
            ref = self._encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        got = self.run(ids, mask)
        assert got is not None, "the engine was just built from these weights"
        if self._bits is not None:
            weights = mask.unsqueeze(-1).float()  # (B, L, 1)
            cosine = float(F.cosine_similarity((got * weights).sum(1), (ref * weights).sum(1), dim=-1).min())
            return None if cosine >= INT8_MIN_COSINE else (
                f"ONNX Runtime's int8 vectors are at cosine {cosine:.3f} to torch's (below {INT8_MIN_COSINE}): "
                "passes run in fp32")
        error = float(((got - ref).abs() * mask.unsqueeze(-1)).max())
        return None if error <= CHECK_ATOL else (
            f"ONNX Runtime's hidden states differ from torch's by {error:.2g}: passes run in torch")

    def run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor | None:
        """(B, L, H) the encoder's last hidden states of a CPU batch (B, L), or None where its weights changed since
        the export (the caller runs torch)."""
        if self._watched.stamp() != self._stamp:
            return None
        threads = torch.get_num_threads()
        session = self._sessions.get(threads)
        if session is None:  # torch's thread count changed: a session at the new count (exported again if not kept)
            with self._lock:
                session = self._sessions.get(threads) or _kept(self._digest, threads, self._encoder, self._bits)[0]
                self._sessions = {threads: session}
        for listener in self.listeners:
            listener(input_ids)
        feeds = {"input_ids": _numpy(input_ids), "attention_mask": _numpy(attention_mask)}
        out = session.run(None, feeds, _shrinking() if input_ids.numel() > SHRINK_TOKENS else None)[0]
        return torch.from_numpy(out)


def _kept(digest: str, threads: int, encoder: nn.Module, bits: int | None, *,
          fresh: bool = False) -> tuple[Any, bool]:
    """(the process's session for these weights at `threads` threads, of the int8 graph with `bits`-bit weights or
    (None) the fp32 one; whether its graph
    came from the disk cache), opened from the cached graph or exported where there is none (`fresh`: exported
    whatever is kept or cached, and cached over it)."""
    key = (digest, threads, bits)
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key) if not fresh else None
        if session is not None:
            _SESSIONS.move_to_end(key)
            return session, False
    path = cached_graph(digest, bits)
    model = None if fresh or path is None else _read(path)
    session = None
    if model is not None:
        try:
            session = _session(model, threads)
        except Exception:  # a damaged cached graph: exported again over it
            session = None
    cached = session is not None
    if session is None:
        with eval_mode(encoder):
            model = _export(encoder)
        model = model if bits is None else _quantized(model, bits)
        if path is not None:
            _write(path, model)
        session = _session(model, threads)
    with _SESSIONS_LOCK:
        _SESSIONS[key] = session
        while len(_SESSIONS) > KEPT_SESSIONS:
            _SESSIONS.popitem(last=False)
    return session, cached


def cached_graph(digest: str, bits: int | None) -> Path | None:
    """Where the exported graph of the weights `digest` is cached, fp32 (`bits` None) or int8 with `bits`-bit
    weights (`CACHE_ENV`; None: none kept on disk)."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen == "0":
        return None
    import onnxruntime

    versions = f"torch{torch.__version__}-ort{onnxruntime.__version__}-op{OPSET}-v{EXPORT_VERSION}"
    return (Path(chosen) if chosen else cache_dir() / "onnx") / f"{digest}-{_graph_kind(bits)}-{versions.replace('+', '_')}.onnx"


def _graph_kind(bits: int | None) -> str:
    return "fp32" if bits is None else "int8" if bits == 8 else f"int8w{bits}"


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # not cached yet, or unreadable: exported again
        return None


def _write(path: Path, model: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, model)
    except OSError:  # a read-only or full cache costs the next load an export, nothing else
        pass


def forget_sessions() -> None:
    """Drop the sessions this process keeps (engines already built keep theirs)."""
    with _SESSIONS_LOCK:
        _SESSIONS.clear()


__all__ = ["CACHE_ENV", "CHECK_ATOL", "CPUEngine", "ENV", "INT8_MIN_COSINE", "cached_graph", "forget_sessions", "wanted"]
