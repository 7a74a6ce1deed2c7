"""The examples run offline end to end on paragraph text, printing recall beside the cosine store and (LangChain's)
the BM25 + cosine hybrid; qrag over a Chroma collection all-MiniLM-L6-v2 filled takes its hops (slow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("script", ["langchain_chain.py", "llama_index_query_engine.py"])
def test_example_runs_offline(script: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--questions", "8"], env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "recall of the gold paragraphs qrag" in out and "cosine InMemoryVectorStore" in out and "answer:" in out
    if script == "langchain_chain.py":
        assert "BM25 + cosine hybrid" in out


@pytest.mark.slow
def test_existing_collection_example_runs_offline() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "existing_collection.py")], env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "qrag over the existing Chroma collection" in out
    assert out.count("  hop ") == 3 and "Maurice Koechlin was a Swiss" in out  # the second hop's passage is found
