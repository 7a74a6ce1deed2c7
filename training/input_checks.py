"""Checks of what users pass in, shared by the index, the searcher and the framework adapters.

Each raises `ValueError` naming the argument, the offending item and what to pass instead, so every public
entry point refuses bad input the same way (and the adapters stay thin).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


def check_texts(texts: Iterable[str]) -> list[str]:
    """The texts as a list, read once (a generator works), each a str that can be encoded."""
    if isinstance(texts, str):
        raise ValueError("texts must be a list of strings, got a single string; wrap it in a list.")
    if isinstance(texts, bytes) or not isinstance(texts, Iterable):
        raise ValueError(f"texts must be a list of strings, got {type(texts).__name__}.")
    out = list(texts)
    if not out:
        raise ValueError("cannot index an empty corpus: pass at least one text.")
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ValueError(f"texts[{i}] must be a str, got {type(t).__name__} ({t!r:.60}).")
        check_encodable(t, f"texts[{i}]")
    return out


def check_encodable(text: str, what: str) -> None:
    """Raise `ValueError` if `text` cannot be written as UTF-8 (a lone surrogate, e.g. from a bad decode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} holds a character that is not valid Unicode ({text[e.start:e.end]!r} at "
                         f"offset {e.start}, a lone surrogate); clean the text (e.g. decode with errors='replace').") from None


def check_ids(ids: Iterable[str] | None, n: int) -> list[str]:
    if ids is None:
        return [str(i) for i in range(n)]
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise ValueError(f"ids must be a list of strings (one per text), got {type(ids).__name__}.")
    out = [str(i) for i in ids]
    if len(out) != n:
        raise ValueError(f"got {len(out)} ids for {n} texts; pass one id per text or none.")
    if len(set(out)) != n:
        dup = next(i for i in out if out.count(i) > 1)
        raise ValueError(f"ids must be unique, {dup!r} appears more than once.")
    return out


def check_metadatas(metadatas: Iterable[Mapping[str, Any]] | None, n: int) -> list[dict[str, Any]]:
    if metadatas is None:
        return [{} for _ in range(n)]
    if isinstance(metadatas, (str, bytes, Mapping)) or not isinstance(metadatas, Iterable):
        raise ValueError(f"metadatas must be a list of dicts (one per text), got {type(metadatas).__name__}.")
    out = []
    for i, m in enumerate(metadatas):
        if m is not None and not isinstance(m, Mapping):
            raise ValueError(f"metadatas[{i}] must be a dict, got {type(m).__name__} ({m!r:.60}).")
        out.append(check_json_metadata(m, f"metadatas[{i}]") if m is not None else {})
    if len(out) != n:
        raise ValueError(f"got {len(out)} metadatas for {n} texts; pass one dict per text or none.")
    return out


def check_json_metadata(metadata: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One chunk's metadata as a dict, checked to be what a save can write: string keys, JSON values.

    Checked when the chunk comes in, before anything is embedded, rather than when a save cannot write it.

    Raises:
        ValueError: a key that is not a string, or a value JSON cannot hold (naming `where`, the key and the
            value's type; a date or time is to be stored as `value.isoformat()`).
    """
    bad = next((k for k in metadata if not isinstance(k, str)), None)
    if bad is not None:
        raise ValueError(f"{where} has a key that is not a string ({bad!r}); use string keys.")
    out = dict(metadata)
    if json_ok(out):  # one dump for the common case; the loop names the culprit
        return out
    for key, value in out.items():
        if not json_ok(value):
            leaf = _not_json(value)
            fix = (f"store it as a string: value.isoformat() ({leaf.isoformat()!r})" if hasattr(leaf, "isoformat")
                   else "store it as a string, number, boolean, list or dict")
            inside = "" if leaf is value else f" holding a {type(leaf).__name__}"
            raise ValueError(f"{where}[{key!r}] is a {type(value).__name__}{inside}, which JSON cannot hold (a save "
                             f"keeps metadata as JSON); {fix}.")
    return out


def _not_json(value: Any) -> Any:
    """The first item inside `value` (a dict's values, a list's items, depth first) that JSON cannot hold."""
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    bad = next((v for v in items if not json_ok(v)), None)
    return value if bad is None else _not_json(bad)


def json_ok(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def check_device(device: Any, error: type[Exception] = ValueError) -> None:
    """Refuse a device string torch cannot parse, or a CUDA/MPS device this machine lacks."""
    if device is None:
        return
    import torch

    if isinstance(device, bool) or not isinstance(device, (str, torch.device)):
        raise error(f"device must be a string such as 'cpu' or 'cuda:0', got {device!r}.")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise error(f"device {device!r} is not a torch device ({e}); use 'cpu', 'cuda' or 'cuda:N'.") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise error(f"device {device!r} was asked for but this machine has no usable CUDA GPU; use device='cpu'.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise error(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s).")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise error(f"device {device!r} was asked for but MPS is not available here; use device='cpu'.")


def one_line(e: BaseException) -> str:
    """An error as one line for a CLI: an OSError as 'PATH: reason', anything else with its whitespace folded."""
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.filename}: {e.strerror or e}"
    return " ".join(str(e).split())


def nearest_existing(path: Path) -> Path:
    """`path` if it exists, else its nearest ancestor that does (a file among them stops the walk there)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_out_path(path: str | Path, flag: str, *, folder: bool) -> None:
    """Refuse an output path that cannot be written: a folder where a file is wanted (or the reverse), a file
    among its parents, or a folder that takes no new entries: no write permission, or a read-only or system folder
    (such as /proc, which refuses even root, whom permission bits do not stop). Raises `ValueError` naming the flag,
    the path, the cause and what to pass instead."""
    out = Path(path)
    if out.exists() and out.is_dir() != folder:
        kind, want = ("a file", "a folder (it is created if missing)") if folder else ("a folder", "a file name")
        raise ValueError(f"{flag} {str(out)!r} is {kind}; pass {want}.")
    parent = nearest_existing(out if folder else out.parent)
    fix = f"pass a {'folder' if folder else 'file'} in a folder you can write to"
    if not parent.is_dir():
        raise ValueError(f"{flag} {str(out)!r} cannot be created: {str(parent)!r} is a file, not a folder; {fix}.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(out)!r} cannot be written: no write permission in {str(parent)!r}; {fix}.")
    try:  # what only trying tells: a read-only or system folder (the probe is nameless, or removed at once)
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as e:
        raise ValueError(f"{flag} {str(out)!r} cannot be written: {str(parent)!r} takes no new files ({e.strerror}: "
                         f"a read-only or system folder); {fix}.") from None


def check_query(query: Any, who: str) -> str:
    """A non-empty question string that can be encoded; `who` names the caller in the message."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"{who} needs a non-empty string query, got {query!r:.80}.")
    check_encodable(query, "the query")
    return query


def check_text_list(texts: Any, what: str) -> list[str]:
    """A list of strings (possibly empty) to embed; a lone string is refused rather than split into characters."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        hint = "; wrap a single text in a list" if isinstance(texts, str) else ""
        raise ValueError(f"{what} must be a list of strings, got {type(texts).__name__}{hint}.")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ValueError(f"{what}[{i}] must be a str, got {type(t).__name__} ({t!r:.60}).")
        check_encodable(t, f"{what}[{i}]")
    return out


def check_trace_keys(metadata: Mapping[str, Any], trace_keys: Sequence[str], where: str) -> None:
    """Refuse user metadata that uses a key the retriever writes its trace under (it would be overwritten)."""
    clash = sorted(set(metadata) & set(trace_keys))
    if clash:
        raise ValueError(f"{where} has metadata key(s) {clash}, which the retriever sets on every result "
                         f"({', '.join(trace_keys)}); rename them in your metadata so they are not overwritten.")


def check_delete_ids(ids: Any, who: str) -> list[str]:
    """The ids a delete names, as a list of strings; `who` names the caller in the message.

    A lone string is refused rather than read as its characters (`delete("12")` would delete '1' and '2'), and
    None rather than read as "everything", as some vector stores do.
    """
    if ids is None:
        raise ValueError(f"{who} needs the ids to delete, got None; qrag never reads None as 'every document': "
                         "pass a list of ids (build a new retriever for a new corpus).")
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"{who} takes a list of ids, got the single string {ids!r}, which would be read as its "
                         f"characters; pass [{ids!r}].")
    if not isinstance(ids, Iterable) or isinstance(ids, Mapping):
        raise ValueError(f"{who} takes a list of ids, got {type(ids).__name__} ({ids!r:.80}).")
    out = list(ids)
    bad = next((i for i in out if not isinstance(i, str)), None)
    if bad is not None:
        raise ValueError(f"{who} takes ids as strings, got {type(bad).__name__} {bad!r:.60}; pass [{str(bad)!r}].")
    return out


def check_retriever_backend(backend: Any, who: str) -> None:
    """Refuse `backend='faiss'` on a retriever: its hops score every chunk with the model (Q plus lexical evidence,
    windows, positions and the floor's mask all need every score), so FAISS would change nothing but the dependency.
    FAISS serves `ChunkIndex.search` / `topk`, the one-step search of a bare vector."""
    if backend == "torch":
        return
    if backend == "faiss":
        raise ValueError(f"{who}(backend='faiss') would search exactly as backend='torch' does: every hop scores "
                         "every chunk with the model (its lexical evidence, windows and the filter's mask need every "
                         "score), so FAISS is never asked. Drop backend=; for a one-step FAISS search of vectors use "
                         "ChunkIndex.from_texts(model, texts, backend='faiss').search(...).")
    raise ValueError(f"{who} got backend={backend!r}; the only backend is 'torch' (the default).")
