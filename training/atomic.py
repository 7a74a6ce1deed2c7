"""Atomic writes: build a folder (or a file) under a temporary sibling name, then rename it into place.

A kill at any moment leaves either the previous folder or the new one, never a half-written one. If the
kill lands between the two renames of a replacement, the previous folder survives at `previous_dir` and
`recover` (run by the next save and by the loaders) puts it back. Temporary folders carry the writer's
process id, so the next save or load removes those whose writer is gone, while one still being written by
a live process is left alone. Folders get the usual permissions (the umask decides), not `mkdtemp`'s 0700.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def previous_dir(target: Path) -> Path:
    """Where the folder being replaced waits while the new one is renamed in."""
    return target.with_name(f".{target.name}.old")


def _tmp_prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def _writer_alive(tmp: Path, prefix: str) -> bool:
    pid_text = tmp.name[len(prefix):].split("-", 1)[0]
    if not pid_text.isdigit():
        return False  # an older, pid-less temporary name: its writer is long gone
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def recover(target: Path) -> None:
    """Undo what a killed writer left: restore `previous_dir` if the kill fell between the two renames,
    and remove temporary folders whose writing process is gone. Best effort (a read-only place is left as is)."""
    target = Path(target)
    parent = target.parent
    if not parent.is_dir():
        return
    old = previous_dir(target)
    try:
        if old.is_dir():
            if target.exists():
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(old, target)
        prefix = _tmp_prefix(target)
        for tmp in parent.glob(f"{prefix}*"):
            if tmp.is_dir() and not _writer_alive(tmp, prefix):
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass


def _mkdir_tmp(target: Path) -> Path:
    """A fresh sibling folder `.NAME.tmp-PID-RANDOM`, created with the umask's permissions."""
    while True:
        tmp = target.with_name(f"{_tmp_prefix(target)}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue


@contextmanager
def atomic_dir(target: Path, *, check: Callable[[Path], object] | None = None,
               replace: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces `target`, on any error it is removed.

    Args:
        target: The folder to write.
        check: Called on the finished temporary folder before the swap (raise to abort; `target` is kept).
        replace: Called with an existing `target` before anything is written: return False to refuse to
            replace it (raises `FileExistsError`), e.g. a folder that is not an earlier save.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    recover(target)
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{str(target)!r} is a file; pass a folder path to save into.")
    if target.is_dir() and replace is not None and not replace(target):
        raise FileExistsError(f"{str(target)!r} exists and is not an earlier save of this kind; refusing to "
                              "replace it (choose an empty or new folder).")
    tmp = _mkdir_tmp(target)
    try:
        yield tmp
        if check is not None:
            check(tmp)
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


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary sibling named by this process, then rename it into place:
    readers see the old file or the new one, never half of one, and writers in other processes do not collide.
    Nothing is left behind when the write fails."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
