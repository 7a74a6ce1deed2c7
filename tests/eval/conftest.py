"""Fixtures for the eval tests: a tiny trained-format checkpoint and a tiny random causal-LM reader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, _tiny_qnet_session) -> Path:  # type: ignore[no-untyped-def]
    """The tiny QNetwork saved as a checkpoint folder (stands in for a trained Q-RAG model)."""
    return _tiny_qnet_session.save_pretrained(tmp_path_factory.mktemp("ckpt") / "model")


@pytest.fixture(scope="session")
def tiny_reader_path(tmp_path_factory: pytest.TempPathFactory, minilm_path: Path) -> Path:
    """A random 1-layer `LlamaForCausalLM` built from a config, saved with the MiniLM tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-reader")
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
                         bos_token_id=tokenizer.cls_token_id)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
