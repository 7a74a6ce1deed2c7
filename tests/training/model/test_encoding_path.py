"""The encoding path's speed levers change no result: whole-corpus tokenisation through the Rust backend,
vectorised padding, the eval-mode switch skipped when there is nothing to switch, the attention kernels."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from qrag.training.model import qnet as qnet_module
from qrag.training.model.qnet import QNetwork
from qrag.training.model.towers import (
    attention_kernels,
    eval_mode,
    pad_rows,
    token_rows,
    token_rows_and_lengths,
)

# Real sentences of several lengths, an empty one, non-ASCII text and one far past every truncation length.
TEXTS = [
    "Mary went to the kitchen.",
    "",
    "Daniel took the football there, then travelled to the garden and put down the football.",
    "naïve café — 東京 🙂 " * 30,
    "The Tower of London is a historic castle on the north bank of the River Thames in central London. " * 8,
    "a",
]


@pytest.mark.parametrize("max_tokens", [8, 32, 128, None])
def test_token_rows_equal_the_transformers_tokenizer(minilm_path: Path, max_tokens: int | None) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path))
    kwargs = {"truncation": True, "max_length": max_tokens} if max_tokens else {"verbose": False}
    want = [list(ids) for ids in tokenizer(TEXTS, **kwargs)["input_ids"]]
    got = token_rows(tokenizer, TEXTS, max_tokens)
    assert got == want
    if max_tokens:
        assert max(len(r) for r in got) == max_tokens  # the long texts really were cut
    # The wrapper's own per-call settings do not leak into the backend copies, nor ours into the wrapper.
    tokenizer(TEXTS[:2], truncation=True, max_length=4)
    assert token_rows(tokenizer, TEXTS, max_tokens) == want
    assert tokenizer(TEXTS[4], verbose=False)["input_ids"] == token_rows(tokenizer, [TEXTS[4]], None)[0]


@pytest.mark.parametrize("max_tokens", [4, 8, 32, 128])
def test_one_pass_gives_the_cut_rows_and_the_whole_lengths(minilm_path: Path, max_tokens: int) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path))
    rows, lengths = token_rows_and_lengths(tokenizer, TEXTS, max_tokens)
    assert rows == token_rows(tokenizer, TEXTS, max_tokens)
    assert lengths == [len(r) for r in token_rows(tokenizer, TEXTS, None)]
    assert lengths[1] == 2 and max(lengths) > 128  # the empty text is [CLS] [SEP]; the long one is counted whole


def test_the_length_check_hands_its_rows_to_the_next_embedding_of_the_same_texts(
    tiny_encoder_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=16).eval()
    want = qnet.embed_chunks(TEXTS, batch_size=2)  # (N, D) tokenised by embed_chunks itself
    over = sum(len(r) > 16 for r in token_rows(qnet.tokenizer, TEXTS, None))  # the whole texts, counted apart
    assert over >= 2
    calls = []
    original = qnet_module.token_rows
    monkeypatch.setattr(qnet_module, "token_rows", lambda *a, **k: calls.append(1) or original(*a, **k))
    with pytest.warns(UserWarning):
        assert qnet.check_chunk_lengths(TEXTS) == over
    torch.testing.assert_close(qnet.embed_chunks(list(TEXTS), batch_size=2), want, rtol=0, atol=0)
    assert calls == []  # the check's rows were used: one tokenisation for check and embedding together
    torch.testing.assert_close(qnet.embed_chunks(TEXTS, batch_size=2), want, rtol=0, atol=0)
    assert calls == [1]  # handed over once: the next embedding tokenises again
    with pytest.warns(UserWarning):
        qnet.check_chunk_lengths(TEXTS)
    other = TEXTS[::-1]
    torch.testing.assert_close(qnet.embed_chunks(other, batch_size=2), want.flip(0), rtol=0, atol=0)
    assert calls == [1, 1]  # other texts: the check's rows are not used for them
    assert qnet._rows_of_checked(TEXTS) is None  # and were dropped


def test_pad_rows_by_hand() -> None:
    out = pad_rows([[5, 6, 7], [8], [9, 10]], pad_id=0)
    assert out["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert out["input_ids"].dtype == out["attention_mask"].dtype == torch.long


def test_embed_chunks_equals_the_chunk_tower_on_the_wrapper_tokens(tiny_encoder_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=16).eval()
    wrapper = qnet.tokenizer(TEXTS, truncation=True, max_length=16, padding=True, return_tensors="pt")
    with torch.no_grad():  # (N, D): one padded batch of the transformers tokenizer's own ids and mask
        want = qnet.chunk_tower(input_ids=wrapper["input_ids"], attention_mask=wrapper["attention_mask"])
    assert qnet.tokenize_chunks(TEXTS)["input_ids"].tolist() == wrapper["input_ids"].tolist()
    with pytest.warns(UserWarning):  # two texts are longer than 16 tokens
        qnet.check_chunk_lengths(TEXTS)
    got = qnet.embed_chunks(TEXTS, batch_size=2)  # pre-tokenised, length-sorted batches of 2
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_eval_mode_restores_training_flags_and_leaves_eval_models_alone(tiny_qnet: QNetwork) -> None:
    tiny_qnet.train()
    tiny_qnet.chunk_tower.eval()  # a submodule in its own mode
    before = {name: m.training for name, m in tiny_qnet.named_modules()}
    with eval_mode(tiny_qnet):
        assert not any(m.training for m in tiny_qnet.modules())
    assert {name: m.training for name, m in tiny_qnet.named_modules()} == before
    tiny_qnet.eval()
    with eval_mode(tiny_qnet):
        assert not any(m.training for m in tiny_qnet.modules())
    assert not any(m.training for m in tiny_qnet.modules())


def test_attention_kernels_leave_the_cpu_to_torch() -> None:
    assert isinstance(attention_kernels(torch.device("cpu")), contextlib.nullcontext)
    assert not isinstance(attention_kernels(torch.device("cuda")), contextlib.nullcontext)  # a choice, not a run


@pytest.mark.parametrize(("position_mode", "advice", "not_advised"), [
    ("none", "long_chunks='windows'", "no windows"),
    ("relative", "scores chunks by their position in one document", "long_chunks='windows'"),
])
def test_the_length_warning_advises_windows_only_where_the_model_can_search_them(
    tiny_encoder_path: Path, position_mode: str, advice: str, not_advised: str,
) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=16, position_mode=position_mode)
    with pytest.warns(UserWarning) as caught:
        qnet.check_chunk_lengths(TEXTS)
    message = str(caught[0].message)
    assert advice in message and not_advised not in message
