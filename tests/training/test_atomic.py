"""Where a save cannot be made: an error naming the path and the cause, not a bare `[Errno 17] File exists`."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest

from qrag.training.atomic import atomic_dir
from qrag.training.model.qnet import QNetwork
from qrag.training.search.index import ChunkIndex
from tests import sigkill

TEXTS = ["Mary went to the kitchen.", "Mary took the milk.", "John is in the garden."]


def _save(kind: str, qnet: QNetwork, target: Path) -> object:
    from llama_index.core.schema import TextNode

    from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever

    if kind == "save_local":
        return QRAGRetriever.from_texts(TEXTS, qnet).save_local(target)
    if kind == "persist":
        return QRAGLlamaIndexRetriever.from_defaults(nodes=[TextNode(text=t) for t in TEXTS], model=qnet).persist(target)
    if kind == "index":
        return ChunkIndex.from_texts(qnet, TEXTS).save(target)
    return qnet.save_pretrained(target)


def _load(kind: str, folder: Path) -> object:
    from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever

    return {"save_local": QRAGRetriever.load_local, "persist": QRAGLlamaIndexRetriever.from_persist_dir,
            "save_pretrained": QNetwork.from_pretrained, "index": ChunkIndex.load}[kind](folder)


@pytest.mark.parametrize("kind", ["save_local", "persist", "save_pretrained", "index"])
@pytest.mark.parametrize("depth", [1, 2])
def test_a_save_under_a_file_names_the_file(kind: str, depth: int, tiny_qnet: QNetwork, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("precious")
    target = tmp_path / "notes.txt" / "sub" if depth == 1 else tmp_path / "notes.txt" / "a" / "sub"
    with pytest.raises(OSError, match=f"cannot save to '{target}': '{tmp_path / 'notes.txt'}' is a file, not a folder"):
        _save(kind, tiny_qnet, target)
    assert (tmp_path / "notes.txt").read_text() == "precious"


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS])
@pytest.mark.parametrize("missing_parent", [False, True])
def test_a_folder_that_refuses_new_folders_is_named(code: int, missing_parent: bool, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # A read-only or system folder, as the OS answers for it (root may write where a chmod would stop a user).
    locked = tmp_path / "locked"
    locked.mkdir()
    real_mkdir = os.mkdir

    def refusing_mkdir(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if Path(path).parent == locked:
            raise OSError(code, os.strerror(code), str(path))
        real_mkdir(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "mkdir", refusing_mkdir)
    target = locked / "a" / "save" if missing_parent else locked / "save"
    with pytest.raises(OSError, match=f"cannot save to '{target}': '{locked}' does not let this process create "
                                      f"folders in it \\({os.strerror(code)}") as caught:
        with atomic_dir(target):
            pass
    assert caught.value.errno == code and "[Errno" not in str(caught.value)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_system_folder_is_named(tiny_qnet: QNetwork) -> None:
    with pytest.raises(OSError, match="cannot save to '/proc/qrag-save': '/proc' does not let this process create"):
        _save("save_pretrained", tiny_qnet, Path("/proc/qrag-save"))


def _sysfs_at_sys() -> bool:
    try:
        return any(line.split()[1:3] == ["/sys", "sysfs"] for line in Path("/proc/mounts").read_text().splitlines())
    except OSError:
        return False


@pytest.mark.skipif(not _sysfs_at_sys(), reason="needs Linux's sysfs at /sys (where even root creates no folder)")
@pytest.mark.parametrize("kind", ["save_local", "persist"])
def test_a_folder_even_root_may_not_write_is_named(kind: str, tiny_qnet: QNetwork) -> None:
    # The real answer of a folder that refuses new folders to every user, root included: EPERM.
    target = Path("/sys/qrag-save")
    with pytest.raises(PermissionError) as caught:
        _save(kind, tiny_qnet, target)
    assert str(caught.value) == (f"cannot save to '{target}': '/sys' does not let this process create folders in it "
                                 "(Operation not permitted: a read-only, another user's or a system folder); choose "
                                 "a folder you can write to.")
    assert not target.exists()


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs a POSIX file-size limit (RLIMIT_FSIZE)")
@pytest.mark.parametrize("kind", ["save_local", "persist", "save_pretrained", "index"])
def test_a_save_failing_on_the_disk_names_the_folder_and_keeps_the_earlier_save(kind: str, tiny_qnet: QNetwork,
                                                                                tmp_path: Path) -> None:
    import resource

    folder = tmp_path / "saved"
    _save(kind, tiny_qnet, folder)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    # A real write failure, for root too: a 200-byte limit on file size (EFBIG, as a full disk gives ENOSPC).
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200, hard))
    try:
        with pytest.raises(OSError) as caught:
            _save(kind, tiny_qnet, folder)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    message = str(caught.value)
    assert message.startswith(f"cannot save to '{folder}': writing the save failed (File too large)")
    assert "ulimit -f" in message and "Nothing saved there before was changed" in message and "[Errno" not in message
    assert caught.value.errno == errno.EFBIG
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert sigkill.strays(folder) == []
    _load(kind, folder)  # the earlier save still loads
