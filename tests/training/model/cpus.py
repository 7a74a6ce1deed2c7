"""CPUs as the precision choice sees them (flags, torch's capability, oneDNN's bf16 switch), for the model tests."""

from __future__ import annotations

import pytest

from qrag.training.model import precision

REAL_CPU_BF16_SUPPORT = precision.cpu_bf16_support  # before tests/conftest.py treats every CPU as native
AVX512_BF16 = frozenset({"sse4_2", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"})
AMX = frozenset({"avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"})
AVX2_ONLY = frozenset({"sse4_2", "fma", "avx2"})


@pytest.fixture()
def cpu(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Set the CPU's flags, torch's capability and oneDNN's bf16 switch; the real choice runs on them."""
    monkeypatch.setattr(precision, "cpu_bf16_support", REAL_CPU_BF16_SUPPORT)
    monkeypatch.setattr(precision.platform, "machine", lambda: "x86_64")

    def set_cpu(flags: frozenset[str], capability: str = "AVX512", onednn: bool = True) -> None:
        monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
        monkeypatch.setattr(precision.torch.backends.cpu, "get_cpu_capability", lambda: capability)
        monkeypatch.setattr(precision, "_onednn_bf16", lambda: onednn)

    return set_cpu
