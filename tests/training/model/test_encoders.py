"""Loading base encoders: safetensors weights only, a pickled folder refused with the way to convert it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from qrag.training.model.encoders import EncoderLoadError, load_encoder


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


def test_a_folder_is_read_once_while_unchanged_and_each_load_owns_its_weights(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModel

    from qrag.training.model import encoders
    from tests.conftest import make_tiny_encoder

    folder = make_tiny_encoder(tmp_path / "enc", seed=1)
    reads = []
    real = AutoModel.from_pretrained
    monkeypatch.setattr(encoders.AutoModel, "from_pretrained", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    (m1, t1), (m2, t2) = load_encoder(str(folder)), load_encoder(str(folder))
    assert len(reads) == 1 and t1 is t2
    first, second = dict(m1.named_parameters()), dict(m2.named_parameters())
    assert all(first[k] is not second[k] and torch.equal(first[k], second[k]) for k in first)
    with torch.no_grad():
        next(iter(first.values())).add_(1.0)  # a caller's weights are its own: the next load is as saved
    (m3, _) = load_encoder(str(folder))
    assert torch.equal(next(iter(dict(m3.named_parameters()).values())), next(iter(second.values())))
    make_tiny_encoder(folder, seed=2)  # the same folder written again: read afresh
    (m4, _) = load_encoder(str(folder))
    assert len(reads) == 2
    assert not torch.equal(next(iter(dict(m4.named_parameters()).values())), next(iter(second.values())))


def test_tokenizers_with_the_same_files_are_one_tokenizer_wherever_they_lie(tiny_qnet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from qrag.training.model.encoders import load_tokenizer

    tiny_qnet.tokenizer.save_pretrained(str(tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert load_tokenizer(tmp_path / "a") is load_tokenizer(tmp_path / "b")
    config = tmp_path / "b" / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"model_max_length": 512', '"model_max_length": 64'))
    changed = load_tokenizer(tmp_path / "b")  # other files: another tokenizer
    assert changed is not load_tokenizer(tmp_path / "a") and changed.model_max_length == 64
