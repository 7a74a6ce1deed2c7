"""Which arithmetic the hardware runs fast: bf16 only where the processor has native bf16 units.

On a CPU, bf16 autocast is fast only with native bf16 instructions (x86: the `avx512_bf16` or `amx_bf16`
flags). Elsewhere (an AVX2-only laptop or cloud CPU) torch emulates it, several times slower than fp32
(docs/RESULTS.md, "The main job on 2 CPU cores, with and without native bf16", its row "Precision per CPU").
So 'auto' means bf16 where it is native and fp32 otherwise, and an explicit 'bf16' on a CPU without it warns
and runs fp32: a user never pays the emulated path in silence.

Two process settings also take the bf16 units away from torch and count here: `ATEN_CPU_CAPABILITY` below
AVX512 (torch's own kernels) and `ONEDNN_MAX_CPU_ISA` below the bf16 instructions (oneDNN's matrix products);
together they make a CPU that has the units behave like one without them.
"""

from __future__ import annotations

import functools
import platform
import warnings
from pathlib import Path

import torch

from qrag.training.model.config import Precision

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""/proc/cpuinfo flags of x86 CPUs that run bf16 arithmetic natively."""

_X86 = ("x86_64", "amd64", "i386", "i686")


def is_x86() -> bool:
    """Whether this process runs on an x86 CPU (whose /proc/cpuinfo flags name its vector units)."""
    return platform.machine().lower() in _X86


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where there is no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return frozenset(flags)


SPEED_FLAGS = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni", "avx_vnni", "amx_int8"})
"""The CPU flags a timing is read with: AVX2, AVX-512, the native bf16 units and the int8 dot products (VNNI, AMX)."""


def vector_flags() -> list[str]:
    """Every vector and matrix flag this CPU lists (avx*, amx*), sorted (the benchmarks' fuller machine line)."""
    return sorted(f for f in cpu_flags() if f.startswith(("avx", "amx")))


def speed_flags() -> list[str]:
    """Which of `SPEED_FLAGS` this CPU lists, sorted (the machine line of every benchmark's JSON)."""
    return sorted(cpu_flags() & SPEED_FLAGS)


def _onednn_bf16() -> bool:
    """Whether oneDNN will run bf16 instructions in this process (False under a lower ONEDNN_MAX_CPU_ISA)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def cpu_bf16_support() -> tuple[bool, str]:
    """(whether this process has native bf16 on the CPU, why) — the reason is printed by the main job."""
    if not is_x86():
        return False, f"bf16 autocast is chosen only on x86 CPUs with {' or '.join(NATIVE_BF16_FLAGS)}"
    native = sorted(set(NATIVE_BF16_FLAGS) & cpu_flags())
    if not native:
        return False, (f"this CPU has no native bf16 (no {' or '.join(NATIVE_BF16_FLAGS)} flag): bf16 would be "
                       "emulated, several times slower than fp32")
    capability = torch.backends.cpu.get_cpu_capability()
    if capability in ("DEFAULT", "AVX2"):
        return False, (f"torch runs this CPU at {capability} (ATEN_CPU_CAPABILITY), without its bf16 units "
                       f"({', '.join(native)})")
    if not _onednn_bf16():
        return False, (f"oneDNN is kept below the CPU's bf16 instructions ({', '.join(native)}; "
                       "ONEDNN_MAX_CPU_ISA)")
    return True, f"this CPU has native bf16 ({', '.join(native)})"


def bf16_support(device: torch.device) -> tuple[bool, str]:
    """(whether `device` runs bf16 natively, why)."""
    if device.type == "cpu":
        return cpu_bf16_support()
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return ok, f"this GPU {'has' if ok else 'has no'} native bf16"
    return True, f"{device.type} runs bf16"


def choose_precision(requested: str, device: torch.device) -> tuple[str, str]:
    """The precision to run (`'fp32'`, `'bf16'` or `'fp16'`) for `requested` on `device`, and why.

    'auto' is bf16 where the device has native bf16 and fp32 otherwise; 'bf16' where it has none is fp32 with a
    RuntimeWarning (emulated bf16 is several times slower than fp32); 'fp32' and 'fp16' are kept as asked
    (`towers.low_precision_dtype` refuses fp16 on a CPU).
    """
    if requested not in ("auto", "bf16"):
        return requested, "as asked"
    native, why = bf16_support(device)
    if native:
        return "bf16", why
    if requested == "bf16":
        warnings.warn(f"precision 'bf16' asked, but {why}; running fp32 instead.", RuntimeWarning, stacklevel=3)
    return "fp32", why


def indexing_precision(requested: Precision) -> Precision:
    """The precision an index is embedded in when a retriever is built with `requested`: 'auto' and 'int8' embed in
    fp32 (the vectors a vector store filled by the same encoder holds, on every machine; only the per-query state
    passes choose by the CPU), anything else as asked."""
    return "fp32" if requested in ("auto", "int8") else requested


def accelerate_precision(requested: str, device: torch.device) -> tuple[str, str]:
    """`trainer.mixed_precision` ('auto', 'no', 'bf16', 'fp16') → the value accelerate takes, and why."""
    chosen, why = choose_precision("fp32" if requested == "no" else requested, device)
    return ("no" if chosen == "fp32" else chosen), why
