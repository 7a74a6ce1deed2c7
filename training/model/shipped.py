"""Trained checkpoints that ship inside the qrag package, loadable by name with no training and no network.

`QNetwork.from_pretrained("qrag/babilong-minilm")`, `load_model(...)`, `QRAGRetriever.from_texts(texts,
model="qrag/babilong-minilm")` all accept a shipped name. For bAbI-style sentence streams: `qrag/babilong-minilm`
(LoRA trained on a GPU, 1.2 MB) and `qrag/babilong-minilm-cpu` (the CPU main job's state-tower fine-tune as
rank-32 adapters, 5.3 MB). For paragraph text: `qrag/hotpotqa-minilm` (trained on HotpotQA's questions, rank-32
adapters, 5.3 MB, searched with the off-domain guard; docs/RESULTS.md, "Paragraph text"). Each stores only its LoRA adapters and names the bundled all-MiniLM-L6-v2 as its base; its folder
holds a MODEL_CARD.md that says how it was trained and what it scores (docs/RESULTS.md has the commands).
"""

from __future__ import annotations

import difflib
from pathlib import Path

CHECKPOINTS_DIR = Path(__file__).parent / "checkpoints"
PREFIX = "qrag/"


def shipped_names() -> list[str]:
    """The names of the checkpoints installed with qrag, e.g. ['qrag/babilong-minilm']."""
    if not CHECKPOINTS_DIR.is_dir():
        return []
    return sorted(PREFIX + d.name for d in CHECKPOINTS_DIR.iterdir() if (d / "qrag_config.json").is_file())


def shipped_path(name: str | Path) -> Path | None:
    """The folder of a shipped checkpoint named `name` ('qrag/NAME'), or None when it is not one."""
    text = str(name)
    if not text.startswith(PREFIX):
        return None
    folder = CHECKPOINTS_DIR / text[len(PREFIX):]
    return folder if (folder / "qrag_config.json").is_file() else None


class ShippedNameError(ValueError):
    """A 'qrag/...' name that is neither a local path nor a shipped checkpoint; the message lists the shipped ones."""


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """Where a checkpoint argument points: an existing local path wins, then a shipped name, else the path as given.

    Raises:
        ShippedNameError: `name_or_path` starts with 'qrag/' but names no shipped checkpoint (a typo would
            otherwise reach the Hugging Face hub as an encoder id and fail with a connection error).
    """
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path
    found = shipped_path(name_or_path)
    if found is not None:
        return found
    if str(name_or_path).startswith(PREFIX):
        names = shipped_names()
        close = difflib.get_close_matches(str(name_or_path), names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ShippedNameError(f"{str(name_or_path)!r} is not a checkpoint shipped with qrag (checkpoints shipped "
                               f"with qrag: {', '.join(names) or 'none installed'}).{hint}")
    return path
