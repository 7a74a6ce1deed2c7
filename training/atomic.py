"""Atomic writes: build a folder (or a file) under a temporary sibling name, then rename it into place.

A kill at any moment leaves either the previous folder or the new one, never a half-written one. If the
kill lands between the two renames of a replacement, the previous folder survives at `previous_dir` and
`recover` (run by the next save and by the loaders) puts it back. Temporary folders carry the writer's
process id, so the next save or load removes those whose writer is gone, while one still being written by
a live process is left alone. Folders get the usual permissions (the umask decides), not `mkdtemp`'s 0700.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from qrag.training.input_checks import nearest_existing


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


def _cannot_save(target: Path, e: OSError) -> OSError:
    """`e`, raised while creating the folders a save of `target` needs, as an error of the same class (and
    errno) whose message names `target` and the cause, instead of a bare `[Errno 17] File exists: PARENT`."""
    above = nearest_existing(target.parent)
    if not above.is_dir():
        cause = f"{str(above)!r} is a file, not a folder"
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
        # ENOENT for a folder whose parent exists: a system folder (/proc) that takes no new entries.
        cause = (f"{str(above)!r} does not let this process create folders in it ({e.strerror}: a read-only, "
                 "another user's or a system folder)")
    else:
        cause = f"creating {e.filename!r} failed ({e.strerror})"
    err = type(e)(f"cannot save to {str(target)!r}: {cause}; choose a folder you can write to.")
    err.errno = e.errno  # the message stays the one above: str() shows errno only beside a strerror
    return err


# True inside the body of an `atomic_dir`: a nested save (model/ and index/ of a searcher) leaves explaining a
# disk error to the outermost one, which names the folder the user asked for, not a temporary one.
_SAVING: ContextVar[bool] = ContextVar("qrag_atomic_saving", default=False)
_FULL = "free some space or choose another disk"
_WRITE_HINTS = {errno.ENOSPC: _FULL, errno.EDQUOT: _FULL,
                errno.EFBIG: "a file is larger than this process or disk may write (`ulimit -f`); raise the limit or "
                             "choose another disk",
                errno.EACCES: "choose a folder you can write to", errno.EPERM: "choose a folder you can write to",
                errno.EROFS: "choose a folder you can write to"}


def _write_failed(target: Path, e: BaseException) -> OSError | None:
    """A disk error met while writing a save of `target` (an OSError, or a library's error quoting one as
    '(os error N)', as safetensors and tokenizers do) as an OSError of the errno's class naming `target`, the
    cause and what to do; None for any other error (raised as it is)."""
    code = e.errno if isinstance(e, OSError) else None
    if not isinstance(e, OSError) and isinstance(e, Exception):
        found = re.search(r"\(os error (\d+)\)", str(e))
        code = int(found.group(1)) if found else None
    if code is None:
        return None
    reason = os.strerror(code)
    hint = _WRITE_HINTS.get(code, "fix the cause and save again")
    err = type(OSError(code, reason))(f"cannot save to {str(target)!r}: writing the save failed ({reason}); "
                                      f"{hint}. Nothing saved there before was changed.")
    err.errno = code  # the class and errno are the system's; str() stays the message above
    return err


@contextmanager
def atomic_dir(target: Path, *, check: Callable[[Path], object] | None = None,
               replace: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces `target`, on any error it is removed.

    Args:
        target: The folder to write.
        check: Called on the finished temporary folder before the swap (raise to abort; `target` is kept).
        replace: Called with an existing `target` before anything is written: return False to refuse to
            replace it (raises `FileExistsError`), e.g. a folder that is not an earlier save.

    Raises:
        OSError: the folders cannot be created (a file in the path, a read-only or system folder), or writing
            fails (a full disk, a file-size limit); the message names `target`, the cause and what to do, the
            class and errno are the system's, and `target` is as it was.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _cannot_save(target, e) from None
    recover(target)
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{str(target)!r} is a file; pass a folder path to save into.")
    if target.is_dir() and replace is not None and not replace(target):
        raise FileExistsError(f"{str(target)!r} exists and is not an earlier save of this kind; refusing to "
                              "replace it (choose an empty or new folder).")
    try:
        tmp = _mkdir_tmp(target)
    except OSError as e:
        raise _cannot_save(target, e) from None
    old, outermost = previous_dir(target), not _SAVING.get()
    token = _SAVING.set(True)
    try:
        yield tmp
        if check is not None:
            check(tmp)
        if old.exists():
            shutil.rmtree(old)
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.is_dir() and not target.exists():  # the swap failed between its two renames: put the old one back
            os.replace(old, target)
        explained = _write_failed(target, e) if outermost else None
        if explained is None:
            raise
        raise explained from None
    finally:
        _SAVING.reset(token)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary sibling named by this process, then rename it into place:
    readers see the old file or the new one, never half of one, and writers in other processes do not collide.
    Nothing is left behind when the write fails."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """`write_text_atomic` for bytes."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
