"""Linear layers that run inference on a CPU through oneDNN's fp32 GEMM instead of torch's default BLAS call.

torch computes an fp32 `nn.Linear` on a CPU with its BLAS library. On some CPUs that call runs well below the
hardware's rate: on the 2-core AMD EPYC (AVX-512) this project is measured on, it runs MiniLM's layer shapes at
about 100 GFLOP/s for an indexing batch and 43–52 for a one-question state, where oneDNN (which torch also
ships) reaches 210–245 and 56–86 (docs/RESULTS.md, "oneDNN linear layers for gradient-free CPU passes").

`CPULinear` is an `nn.Linear` (same parameters, same state-dict keys, same result up to float rounding) whose
forward calls oneDNN's linear on the dense weight when nothing needs a gradient: a CPU fp32 input, no autograd, no
autocast. Everything else (training's backward passes, GPUs, bf16 autocast) takes `nn.Linear`'s own path, so
gradients are exactly `nn.Linear`'s, and no weight is copied. oneDNN's op is reached through
`torch.ops.mkldnn._linear_pointwise`, an underscored op of torch's oneDNN bindings: `available()` checks once
that it exists and agrees with `F.linear`, and the layers fall back to `F.linear` when it does not.
The path is used on x86-64 CPUs only (where it was measured); `QRAG_CPU_LINEAR=torch` turns it off there.
"""

from __future__ import annotations

import functools
import os
import platform

import torch
from torch import nn
from torch.nn import functional as F

ENV = "QRAG_CPU_LINEAR"
X86_64 = ("x86_64", "amd64")


@functools.cache
def available() -> bool:
    """Whether oneDNN's linear exists in this torch build and matches `F.linear` on a small case (checked once)."""
    choice = os.environ.get(ENV, "").strip().lower() or "onednn"
    if choice not in ("onednn", "torch"):
        raise ValueError(f"{ENV}={os.environ[ENV]!r} is not a linear-layer path: set it to 'torch' (torch's own "
                         "BLAS call) or 'onednn' (the default), or unset it.")
    if choice == "torch":
        return False
    if platform.machine().lower() not in X86_64:  # measured on x86-64 only; elsewhere (Apple silicon's
        return False  # Accelerate, ARM builds of oneDNN) torch's own BLAS call may well be the faster one
    op = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if op is None or not torch.backends.mkldnn.is_available():
        return False
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*shape, generator=gen) for shape in ((3, 5, 16), (8, 16), (8,)))
    try:
        with torch.no_grad():
            out = op(x, w, b, "none", [], "")
    except (RuntimeError, TypeError):
        return False
    return out.shape == (3, 5, 8) and torch.allclose(out, F.linear(x, w, b), atol=1e-5)


class CPULinear(nn.Linear):
    """`nn.Linear` whose gradient-free CPU fp32 forward runs oneDNN's GEMM (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            x.device.type == "cpu"
            and x.dtype == torch.float32
            and self.weight.dtype == torch.float32
            and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
            and x.dim() >= 2
            and available()
        ):
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def use_cpu_linears(module: nn.Module) -> int:
    """Turn every plain `nn.Linear` inside `module` (LoRA's base and adapter layers included) into a `CPULinear`
    in place, keeping its parameters, buffers and hooks; subclasses of `nn.Linear`, which may have their own
    forward, are left as they are. Returns how many were turned."""
    count = 0
    for sub in module.modules():
        if type(sub) is nn.Linear:
            sub.__class__ = CPULinear
            count += 1
    return count
