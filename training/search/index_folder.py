"""A saved `ChunkIndex`'s folder: its header, vectors, windows and BM25 index, written and read back.

`index.json` holds the settings, texts, ids and metadata; the vectors are safetensors or NumPy `.npy`; the later
windows of long chunks and the BM25 index are there when the index holds them. No pickle.

Shape legend: N chunks, W windows, D vector dim.

`write_index` writes it atomically (a temp folder renamed over an earlier index, never over a foreign folder);
`read_index` checks every file against the header and names the one that is missing or damaged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from qrag.training.atomic import atomic_dir, recover
from qrag.training.input_checks import json_ok
from qrag.training.search.lexical import LexicalIndex, LexicalLoadError
from qrag.training.search.windows import Windows

VectorFormat = Literal["safetensors", "numpy"]
INDEX_FORMAT = "qrag-chunk-index"
INDEX_VERSION = 1
INDEX_FILE = "index.json"
LEXICAL_DIR = "lexical"  # the BM25 index of the texts, when the index holds one
VECTOR_FILES: dict[str, str] = {"safetensors": "vectors.safetensors", "numpy": "vectors.npy"}
_WINDOW_FILES: dict[str, tuple[str, ...]] = {"safetensors": ("windows.safetensors",),
                                             "numpy": ("window_vectors.npy", "window_owner.npy")}


class IndexLoadError(ValueError):
    """A saved index folder is missing, incomplete or corrupt; the message names the file and the fix."""


@dataclass(frozen=True)
class SavedIndex:
    """What an index folder holds.

    Args:
        vectors: (N, D) the chunk vectors.
        texts, ids, metadatas: The N chunks, in row order.
        lexical: The BM25 index of the texts, if the index held one.
        windows: The later windows of long chunks, if the index held them.
        settings: The `ChunkIndex` settings saved beside them (backend, encoder, ordered, chunk_tower, precision,
            long_chunks), defaults filled in for folders saved before a setting existed.
    """

    vectors: torch.Tensor
    texts: list[str]
    ids: list[str]
    metadatas: list[dict[str, Any]]
    lexical: LexicalIndex | None
    windows: Windows | None
    settings: dict[str, Any]


def write_index(folder: str | Path, saved: SavedIndex, vector_format: VectorFormat = "safetensors") -> Path:
    """Write `saved` into `folder` (atomic: a temp folder renamed over an empty folder or an earlier index).

    Raises:
        ValueError: metadata that JSON cannot hold (the message names the chunk), or an unknown format.
    """
    if vector_format not in VECTOR_FILES:
        raise ValueError(f"vector_format must be one of {sorted(VECTOR_FILES)}, got {vector_format!r}.")
    target = Path(folder)
    settings = saved.settings
    header = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "count": len(saved.texts),
        "dim": int(saved.vectors.shape[1]),
        "backend": settings["backend"],
        "encoder": settings["encoder"],
        "ordered": settings["ordered"],
        "chunk_tower": settings["chunk_tower"],
        "vector_file": VECTOR_FILES[vector_format],
        "lexical": saved.lexical is not None,
        "precision": settings["precision"],
        "long_chunks": settings["long_chunks"],
        "windows": None if saved.windows is None else len(saved.windows),
        "ids": saved.ids,
        "texts": saved.texts,
        "metadatas": saved.metadatas,
    }
    try:
        blob = json.dumps(header, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        bad = next((i for i, m in enumerate(saved.metadatas) if not json_ok(m)), None)
        raise ValueError(
            f"cannot save the index: metadata of chunk {bad} ({saved.ids[bad] if bad is not None else '?'!r}) is "
            f"not JSON-serialisable ({e}); keep metadata to strings, numbers, lists and dicts."
        ) from None
    with atomic_dir(target, replace=_replaceable) as tmp:
        vectors = saved.vectors.detach().cpu().contiguous()  # (N, D)
        if vector_format == "safetensors":
            save_file({"vectors": vectors}, str(tmp / VECTOR_FILES["safetensors"]))
        else:
            np.save(tmp / VECTOR_FILES["numpy"], vectors.numpy(), allow_pickle=False)
        if saved.lexical is not None:
            saved.lexical.save(tmp / LEXICAL_DIR)
        if saved.windows is not None:
            _save_windows(saved.windows, tmp, vector_format)
        (tmp / INDEX_FILE).write_text(blob, encoding="utf-8")
    return target


def read_index(folder: str | Path) -> SavedIndex:
    """Read a folder written by `write_index` (no pickle: JSON + safetensors or `.npy`).

    Raises:
        IndexLoadError: the folder or a file is missing, or the files disagree with each other.
    """
    d = Path(folder)
    recover(d)
    head_path = d / INDEX_FILE
    if not head_path.is_file():
        raise IndexLoadError(
            f"{str(d)!r} is not a saved ChunkIndex: {INDEX_FILE} is missing (write one with ChunkIndex.save)."
        )
    try:
        head = json.loads(head_path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:  # JSONDecodeError, UnicodeDecodeError, PermissionError
        raise IndexLoadError(f"{head_path} is corrupt (not valid JSON: {e}); rebuild and save the index.") from None
    if not isinstance(head, dict) or head.get("format") != INDEX_FORMAT:
        raise IndexLoadError(f"{head_path} is not a qrag chunk-index header; rebuild and save the index.")
    if not isinstance(head.get("version", 0), int) or head.get("version", 0) > INDEX_VERSION:
        raise IndexLoadError(f"{str(d)!r} was written by a newer qrag (index version {head['version']}); upgrade qrag.")
    vec_name = str(head.get("vector_file"))
    vec_path = d / vec_name
    if vec_name not in VECTOR_FILES.values() or not vec_path.is_file():
        raise IndexLoadError(f"{str(d)!r}: the vector file {vec_name!r} is missing; rebuild and save the index.")
    try:
        if vec_name.endswith(".npy"):
            vectors = torch.from_numpy(np.load(vec_path, allow_pickle=False))  # (N, D)
        else:
            vectors = load_file(str(vec_path))["vectors"]  # (N, D)
    except Exception as e:  # noqa: BLE001 - any reader failure means a corrupt file
        raise IndexLoadError(f"{vec_path} is corrupt ({type(e).__name__}: {e}); rebuild and save the index.") from None
    texts, ids, metas = head.get("texts"), head.get("ids"), head.get("metadatas")
    count = head.get("count")
    if not (isinstance(texts, list) and isinstance(ids, list) and isinstance(metas, list)):
        raise IndexLoadError(f"{head_path} lacks its texts, ids or metadatas lists; rebuild and save the index.")
    if not (len(texts) == len(ids) == len(metas) == count == vectors.shape[0]) or vectors.dim() != 2:
        raise IndexLoadError(
            f"{str(d)!r} is inconsistent: {count} chunks in the header, {len(texts)} texts, {len(ids)} ids, "
            f"vectors of shape {tuple(vectors.shape)}; rebuild and save the index."
        )
    if vectors.is_floating_point() and not bool(torch.isfinite(vectors).all()):
        raise IndexLoadError(f"{vec_path} holds NaN or infinite vectors (damaged file or a diverged model); "
                             "rebuild and save the index.")
    lexical = None
    if head.get("lexical", False):  # absent in indexes saved before lexical evidence
        try:
            lexical = LexicalIndex.load(d / LEXICAL_DIR, count=len(texts), texts=texts)
        except LexicalLoadError as e:
            raise IndexLoadError(str(e)) from None
    windows = _load_windows(d, vec_name, head.get("windows"))  # absent in indexes saved before windows
    settings = {"backend": head.get("backend", "torch"), "encoder": head.get("encoder"),
                "chunk_tower": head.get("chunk_tower"), "ordered": bool(head.get("ordered", False)),
                "precision": head.get("precision", "fp32"),  # absent in indexes saved before `add`
                "long_chunks": head.get("long_chunks", "cut")}
    return SavedIndex(vectors, texts, ids, metas, lexical, windows, settings)


def _replaceable(folder: Path) -> bool:
    """A folder `write_index` may replace: empty, or an earlier index."""
    return (folder / INDEX_FILE).is_file() or not any(folder.iterdir())


def _save_windows(windows: Windows, folder: Path, vector_format: VectorFormat) -> None:
    vectors, owner = windows.vectors.detach().cpu().contiguous(), windows.owner.cpu().contiguous()
    if vector_format == "safetensors":
        save_file({"vectors": vectors, "owner": owner}, str(folder / _WINDOW_FILES["safetensors"][0]))
    else:
        np.save(folder / _WINDOW_FILES["numpy"][0], vectors.numpy(), allow_pickle=False)
        np.save(folder / _WINDOW_FILES["numpy"][1], owner.numpy(), allow_pickle=False)


def _load_windows(folder: Path, vector_file: str, count: Any) -> Windows | None:
    """The windows a saved index holds (None where it holds none), in the format of its vectors."""
    if count is None:
        return None
    names = _WINDOW_FILES["numpy" if vector_file.endswith(".npy") else "safetensors"]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise IndexLoadError(f"{str(folder)!r}: the window file {missing[0]!r} is missing; rebuild and save the index.")
    try:
        if len(names) == 2:
            vectors = torch.from_numpy(np.load(folder / names[0], allow_pickle=False))
            owner = torch.from_numpy(np.load(folder / names[1], allow_pickle=False))
        else:
            got = load_file(str(folder / names[0]))
            vectors, owner = got["vectors"], got["owner"]
        windows = Windows(vectors.float(), owner.long())
    except Exception as e:  # noqa: BLE001 - a missing tensor, a bad shape or a damaged file all mean the same
        raise IndexLoadError(f"{folder / names[0]} is corrupt ({type(e).__name__}: {e}); rebuild and save the "
                             "index.") from None
    if len(windows) != count:
        raise IndexLoadError(f"{str(folder)!r} is inconsistent: {count} windows in the header, {len(windows)} in "
                             f"{names[0]}; rebuild and save the index.")
    return windows
