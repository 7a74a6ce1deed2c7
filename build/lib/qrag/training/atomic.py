"""Atomic folder writes: build the folder under a temporary sibling name, then rename it into place.

A kill at any moment leaves either the previous folder or the new one, never a half-written one. If the
kill lands between the two renames of a replacement, the previous folder survives at `previous_dir`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def previous_dir(target: Path) -> Path:
    """Where the folder being replaced waits while the new one is renamed in."""
    return target.with_name(f".{target.name}.old")


@contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces `target`, on any error it is removed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        old = previous_dir(target)
        if old.exists():
            shutil.rmtree(old)
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
