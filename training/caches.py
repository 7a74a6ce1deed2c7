"""Where qrag keeps what it can compute again: `$QRAG_CACHE_DIR`, else `$XDG_CACHE_HOME/qrag`, else ~/.cache/qrag.

Split sentences of the bundled texts (`qrag.training.data.text_sources`) and the CPU engine's exported encoders
(`qrag.training.model.onnx_engine`) live there; deleting the folder costs only the time to compute them again.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache folder (module docstring); it may not exist yet."""
    if os.environ.get("QRAG_CACHE_DIR"):
        return Path(os.environ["QRAG_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qrag"


__all__ = ["cache_dir"]
