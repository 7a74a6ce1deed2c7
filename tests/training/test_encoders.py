"""Loading base encoders: safetensors weights only, a pickled folder refused with the way to convert it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from qrag.training.encoders import EncoderLoadError, load_encoder


class _RunsCode:
    """What a malicious pickle does: run code when it is loaded (here, create the folder `marker`)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.mkdir, (str(self.marker),)


def _pickled_copy(encoder: Path, folder: Path, marker: Path | None) -> Path:
    out = Path(shutil.copytree(encoder, folder))
    weights = load_file(out / "model.safetensors")
    (out / "model.safetensors").unlink()
    torch.save({**weights, "extra": _RunsCode(marker)} if marker else weights, out / "pytorch_model.bin")
    return out


@pytest.mark.parametrize("runs_code", [False, True], ids=["tensors", "code"])
def test_a_pickled_encoder_is_refused_and_the_message_converts_it(runs_code: bool, tiny_encoder_path: Path,
                                                                   tmp_path: Path) -> None:
    marker = tmp_path / "the-pickle-ran"
    folder = _pickled_copy(tiny_encoder_path, tmp_path / "enc", marker if runs_code else None)
    with pytest.raises(EncoderLoadError, match=r"pytorch_model\.bin holds pickled weights, and qrag loads "
                                               r"safetensors weights only") as caught:
        load_encoder(str(folder))
    assert "weights_only" not in str(caught.value) and not marker.exists()  # not torch's message; the pickle never ran
    if not runs_code:  # the conversion the message gives works, and gives the same weights
        exec(str(caught.value).split("`")[1])
        converted, original = load_encoder(str(folder))[0], load_encoder(str(tiny_encoder_path))[0]
        assert all(torch.equal(a, b) for a, b in zip(converted.state_dict().values(), original.state_dict().values(),
                                                     strict=True))
