"""A run's checkpoint files: `trainer_state.json` and `trainer_tensors.safetensors` beside `model/` (no pickle).

A run folder holds `last/` (everything needed to resume) and `best/` (the model chosen on the validation
split by `qrag.training.learn.checkpoint_selection.Selection`; a plain `QNetwork` folder). Both are written with
`qrag.training.atomic.atomic_dir`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from qrag.training.atomic import atomic_dir, previous_dir
from qrag.training.model.folder import short

TRAINER_STATE = "trainer_state.json"
TENSORS = "trainer_tensors.safetensors"
MODEL_DIR = "model"


class ResumeError(ValueError):
    """A run folder cannot be resumed (missing, incompatible or damaged checkpoint)."""


def find_last(output_dir: Path) -> Path | None:
    """The newest complete resume checkpoint of a run folder, or None."""
    last = output_dir / "last"
    for d in (last, previous_dir(last)):
        if (d / TRAINER_STATE).is_file() and (d / TENSORS).is_file():
            return d
    return None


def optimizer_to_tensors(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split an optimiser `state_dict` into flat tensors and a JSON-able rest."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, per_param in state["state"].items():
        for key, value in per_param.items():
            if torch.is_tensor(value):
                tensors[f"optimizer.{idx}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_from_tensors(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            _, idx, key = name.split(".", 2)
            state.setdefault(int(idx), {})[key] = value
    for idx, values in rest["scalars"].items():
        state.setdefault(int(idx), {}).update(values)
    return {"state": state, "param_groups": rest["param_groups"]}


def write_checkpoint(target: Path, save_model: Any, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
    """Write `state` (JSON), `tensors` and the model (via `save_model(folder)`) to `target` atomically."""
    with atomic_dir(target) as tmp:
        save_model(tmp / MODEL_DIR)
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / TENSORS))
        (tmp / TRAINER_STATE).write_text(json.dumps(state, indent=1), encoding="utf-8")


def read_checkpoint(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors and JSON state of a resume checkpoint.

    Raises:
        ResumeError: a file is missing, truncated, not JSON / safetensors, or the state is not a JSON object.
    """
    with resume_guard(folder):
        state = json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
        tensors = load_file(str(folder / TENSORS))
        if not isinstance(state, dict):
            raise TypeError(f"{TRAINER_STATE} holds a {type(state).__name__}, not an object")
    return tensors, state


@contextmanager
def resume_guard(folder: Path) -> Iterator[None]:
    """Turn any failure while restoring from `folder` into a `ResumeError` naming it and the way out.

    A damaged `last/` (truncated file, edited JSON, missing key, tensors of the wrong shape) otherwise
    escapes as the library's own KeyError, SafetensorError or size-mismatch RuntimeError.
    """
    try:
        yield
    except ResumeError:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RuntimeError, SafetensorError) as e:
        raise ResumeError(f"resume checkpoint {str(folder)!r} is damaged ({type(e).__name__}: {short(e)}); delete "
                          "it to start over (a complete earlier copy, if any, is used instead), or choose another "
                          "trainer.output_dir.") from None
