"""The text pack (`qrag.training.data.text_pack`) and its command (`scripts/gpu/offline.py pack`), on one small
text source (britannica, ~1 400 sentences)."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from qrag.training.data import load_episodes
from qrag.training.data import text_sources as ts
from qrag.training.data.text_pack import (
    install_text_pack,
    maybe_install_text_pack,
    read_text_pack,
    write_text_pack,
)

REPO = Path(__file__).resolve().parents[3]
SOURCES = ("britannica",)


@pytest.fixture(scope="module")
def text_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pack") / "sentences.json.xz"
    counts = write_text_pack(path, SOURCES, preset=1)
    assert counts["britannica"] > 1000
    return path


def _episodes() -> list:  # type: ignore[type-arg]
    return [
        *load_episodes("babilong", task="qa2", split="test", num_samples=2, num_sentences=300, sources=SOURCES),
        *load_episodes("ruler_niah", task="niah_multivalue", split="test", num_samples=2, num_tokens="4k",
                       sources=SOURCES),
    ]


def test_text_pack_gives_the_same_episodes_as_the_packages(text_pack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _episodes()
    monkeypatch.setattr(ts, "sentence_pool", ts.sentence_pool)  # the package-backed pools come back afterwards
    assert set(install_text_pack(text_pack)) == {"britannica"}
    after = _episodes()
    assert [(e.chunks, e.supporting, e.question) for e in after] == [(e.chunks, e.supporting, e.question) for e in before]
    with pytest.raises(FileNotFoundError, match="not in the text pack"):
        ts.sentence_pool("kjv")


def test_only_a_path_or_the_environment_variable_installs_a_pack(text_pack: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ts, "sentence_pool", ts.sentence_pool)
    monkeypatch.delenv("QRAG_TEXT_PACK", raising=False)
    assert maybe_install_text_pack() is None
    monkeypatch.setenv("QRAG_TEXT_PACK", str(text_pack))
    assert maybe_install_text_pack() == {"britannica": ts.sentence_pool("britannica").split_all()}
    monkeypatch.setenv("QRAG_TEXT_PACK", str(tmp_path / "missing.json.xz"))
    with pytest.raises(FileNotFoundError, match="offline.py pack PATH"):
        maybe_install_text_pack()
    bad = tmp_path / "other.json.xz"
    write_text_pack(bad, SOURCES, preset=1)
    with lzma.open(bad, "rt", encoding="utf-8") as f:
        blob = json.load(f)
    blob["split_version"] = -1
    with lzma.open(bad, "wt", encoding="utf-8") as f:
        json.dump(blob, f)
    with pytest.raises(ValueError, match="SPLIT_VERSION=-1"):
        read_text_pack(bad)


def test_pack_command(tmp_path: Path) -> None:
    path = tmp_path / "pack.json.xz"
    script = str(REPO / "scripts" / "gpu" / "offline.py")
    done = subprocess.run([sys.executable, script, "pack", str(path), "--sources", "britannica"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "-> " + str(path) in done.stdout
    assert list(read_text_pack(path)["sources"]) == ["britannica"]
    bad = tmp_path / "bad.json.xz"
    done = subprocess.run([sys.executable, script, "pack", str(bad), "--sources", "britannica,nope"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "unknown text source 'nope'" in done.stderr and not bad.exists()
