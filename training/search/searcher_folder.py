"""A saved searcher's folder: `model/`, `index/` and `search.json`, written as one atomic swap, read back checked.

`model/` is `QNetwork.save_pretrained`'s folder, `index/` `ChunkIndex.save`'s, and `search.json` holds the search
settings and the model's serving precision; the adapters add their own files beside them (`extra_files`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from qrag.training.atomic import atomic_dir, recover
from qrag.training.model.qnet import QNetwork, read_checkpoint_meta
from qrag.training.model.towers import PRECISIONS, Precision
from qrag.training.search.hops import SearchConfig, SearchError
from qrag.training.search.index import INDEX_FILE, ChunkIndex

SEARCH_FILE = "search.json"
SEARCH_FORMAT = "qrag-multihop-searcher"
MODEL_DIR, INDEX_DIR = "model", "index"


def write_searcher(folder: Path, model: QNetwork, index: ChunkIndex, config: SearchConfig,
                   extra_files: Mapping[str, str] | None) -> None:
    """Write the three parts and `extra_files` (name → text) beside `folder`, check them, swap them in."""
    tower = model.chunk_tower_fingerprint()
    if index.chunk_tower is not None and index.chunk_tower != tower:
        raise SearchError("the index was embedded by another chunk tower than this model's (was the model trained "
                          "or replaced after indexing?); rebuild it with ChunkIndex.from_texts(model, ...).")
    blob = json.dumps({"format": SEARCH_FORMAT, "version": 1, "config": dataclasses.asdict(config),
                       "serving_precision": model.serving_asked}, indent=2)
    with atomic_dir(folder, check=_check_saved, replace=_replaceable) as tmp:
        model.save_pretrained(tmp / MODEL_DIR)
        index.save(tmp / INDEX_DIR)
        (tmp / SEARCH_FILE).write_text(blob, encoding="utf-8")
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")


def read_searcher(folder: Path, encoder: str | None) -> tuple[QNetwork, ChunkIndex, SearchConfig, Precision]:
    """The model, index, settings and the model's serving precision (`QNetwork.serve_in`, for the caller to apply
    on the device it serves from) of a folder `write_searcher` wrote (an interrupted swap recovered first)."""
    recover(folder)
    config, precision = _read_head(folder)
    model = QNetwork.from_pretrained(folder / MODEL_DIR, encoder=encoder).merge_adapters()  # served, as load_model does
    index = ChunkIndex.load(folder / INDEX_DIR)
    if index.chunk_tower is not None and index.chunk_tower != model.chunk_tower_fingerprint():
        raise SearchError(f"{folder / INDEX_DIR} was embedded by another chunk tower than the model in "
                          f"{folder / MODEL_DIR} (a mixed or hand-assembled folder); save the searcher again from one model.")
    return model, index, config, precision


def recover_folder(folder: str | Path) -> Path:
    """`folder` ready to read: a save killed between its two renames is put back first (`atomic.recover`)."""
    d = Path(folder)
    recover(d)
    return d


def _read_head(d: Path) -> tuple[SearchConfig, Precision]:
    head_path = d / SEARCH_FILE
    if not head_path.is_file():
        raise SearchError(f"{str(d)!r} is not a saved qrag searcher/retriever: {SEARCH_FILE} is missing.")
    try:
        head = json.loads(head_path.read_text(encoding="utf-8"))
        if not isinstance(head, dict) or head.get("format") != SEARCH_FORMAT:
            raise ValueError(f"format {head.get('format') if isinstance(head, dict) else type(head).__name__!r}")
        precision = head.get("serving_precision", "fp32")  # absent in saves before serving precisions
        if precision not in PRECISIONS:
            raise ValueError(f"serving_precision {precision!r}")
        return SearchConfig(**head["config"]).validate(), precision
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:
        raise SearchError(f"{head_path} is corrupt ({type(e).__name__}: {e}); save it again.") from None


def _check_saved(d: Path) -> None:
    """What a finished save must hold before it replaces the previous one (headers parse, files present)."""
    _read_head(d)
    read_checkpoint_meta(d / MODEL_DIR)
    if not (d / INDEX_DIR / INDEX_FILE).is_file():
        raise SearchError(f"{d / INDEX_DIR} was not written completely; nothing was replaced.")


def _replaceable(folder: Path) -> bool:
    """A folder `save` may replace: empty, or an earlier save."""
    return (folder / SEARCH_FILE).is_file() or not any(folder.iterdir())
