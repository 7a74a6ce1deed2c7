"""The checkpoints shipped inside qrag load offline by name and retrieve a bAbI-style chain."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from qrag.training.encoders import BUNDLED_MINILM
from qrag.training.qnet import CheckpointError, QNetwork
from qrag.training.search import load_model
from qrag.training.shipped import shipped_names, shipped_path

NAME = "qrag/babilong-minilm"  # LoRA r16 trained on an H100
CPU_NAME = "qrag/babilong-minilm-cpu"  # the CPU main job's full state-tower fine-tune as rank-32 adapters
MAX_MB = {NAME: 4, CPU_NAME: 8}  # adapters + tokenizer beside the bundled ~90 MB base, not a copy of it
STORY = ["Mary went to the kitchen.", "Mary took the milk there.", "John went to the garden.",
         "Mary travelled to the office.", "The grass is green."]


@pytest.mark.parametrize("name", [NAME, CPU_NAME])
def test_shipped_checkpoint_is_listed_documented_and_small(name: str) -> None:
    assert name in shipped_names()
    folder = shipped_path(name)
    assert folder is not None and (folder / "MODEL_CARD.md").is_file() and (folder / "scores.json").is_file()
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size < MAX_MB[name] * 2**20


@pytest.mark.parametrize("name", [NAME, CPU_NAME])
def test_shipped_checkpoint_loads_by_name_and_hops_through_the_story(name: str) -> None:
    qnet = QNetwork.from_pretrained(name)
    assert qnet.config.encoder == BUNDLED_MINILM and qnet.config.train_mode == "lora"
    assert load_model(name).trainable_state_dict().keys() == qnet.trainable_state_dict().keys()
    from qrag.integrations import QRAGRetriever

    docs = QRAGRetriever.from_texts(STORY, model=qnet, k=None, ordered=True).invoke("Where is the milk?")  # the stop rule decides
    texts = [d.page_content for d in docs]
    assert texts[0] == "Mary took the milk there."  # hop 1: who has the milk
    assert "Mary travelled to the office." in texts  # a later hop: where she went
    assert "The grass is green." not in texts and "John went to the garden." not in texts
    # the stop rule kept exactly the hops whose Q reached the model's calibrated threshold
    assert all(d.metadata["q_value"] >= qnet.hop_settings.stop_threshold for d in docs) and len(docs) < qnet.hop_settings.max_hops


def test_unknown_name_lists_what_ships() -> None:
    assert shipped_path("qrag/no-such-model") is None and shipped_path("babilong-minilm") is None
    with pytest.raises(CheckpointError, match="shipped with qrag: qrag/babilong-minilm, qrag/babilong-minilm-cpu"):
        QNetwork.from_pretrained("qrag/no-such-model")


@pytest.mark.slow
@pytest.mark.parametrize("name", [NAME, CPU_NAME])
def test_shipped_checkpoint_reproduces_its_documented_cpu_scores(tmp_path: Path, name: str) -> None:
    """`qrag-eval` at 1K on CPU gives the model card's figures (scores.json) within sampling error."""
    from qrag.eval.cli import main

    documented = json.loads((shipped_path(name) / "scores.json").read_text())["cpu_1k"]  # type: ignore[operator]
    n = documented["num_samples"]
    args = ["babilong", "--tasks", ",".join(documented["fact_em"]["qrag+stop"]), "--lengths", "1k",
            "--num-samples", str(n), "--methods", "qrag,qrag+stop", "--model", name,
            "--max-hops", str(documented["max_hops"]), "--out", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    cells = json.loads((tmp_path / "summary.json").read_text())["cells"]
    for cell in cells:
        expected = documented["fact_em"][cell["method"]][cell["task"]]
        tolerance = 2 * math.sqrt(max(expected * (1 - expected), 0.01) / n)  # two standard errors
        assert abs(cell["fact_em"] - expected) <= tolerance, (cell["method"], cell["task"], cell["fact_em"], expected)
