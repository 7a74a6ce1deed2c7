"""Everything saved before the core moved into floors still loads and answers as it did: a model folder, a
LangChain retriever, a LlamaIndex persist folder, and a training run resumed (tests/fixtures/saved_before_floors)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from qrag.training.learn.config import load_yaml
from qrag.training.learn.trainer import Trainer
from qrag.training.model import QNetwork
from tests.training.learn.two_hop import make_two_hop_episodes

SAVED = Path(__file__).resolve().parents[1] / "fixtures" / "saved_before_floors"
EXPECTED = json.loads((SAVED / "expected.json").read_text())


@pytest.fixture()
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the folders (loading may recover an interrupted save in place), as the working directory: the
    run names its encoder by the relative path `encoder`."""
    copy = tmp_path / "saved"
    shutil.copytree(SAVED, copy)
    monkeypatch.chdir(copy)
    return copy


def test_a_model_folder_loads_and_retrieves_as_it_did(saved: Path) -> None:
    from qrag.integrations import QRAGRetriever

    qnet = QNetwork.from_pretrained(saved / "model")
    retriever = QRAGRetriever.load_local(saved / "langchain_retriever")
    assert torch.equal(qnet.embed_chunks(["bob has the cup."]), retriever.searcher.model.embed_chunks(["bob has the cup."]))
    texts = retriever.searcher.index.texts  # type: ignore[union-attr]
    fresh = QRAGRetriever.from_texts(texts, model=qnet, ids=[f"d{i}" for i in range(len(texts))], k=2, max_hops=2)
    assert [d.id for d in fresh.invoke(EXPECTED["question"])] == [row[0] for row in EXPECTED["langchain"]]


def test_a_langchain_retriever_saved_before_loads(saved: Path) -> None:
    from qrag.integrations import QRAGRetriever

    docs = QRAGRetriever.load_local(saved / "langchain_retriever").invoke(EXPECTED["question"])
    assert [[d.id, d.page_content, d.metadata["source"]] for d in docs] == EXPECTED["langchain"]


def test_a_llama_index_persist_folder_saved_before_loads(saved: Path) -> None:
    from qrag.integrations import QRAGLlamaIndexRetriever

    nodes = QRAGLlamaIndexRetriever.from_persist_dir(saved / "llama_index_persist").retrieve(EXPECTED["question"])
    assert [[n.node.node_id, n.node.get_content()] for n in nodes] == [row[:2] for row in EXPECTED["llama_index"]]
    assert [n.score for n in nodes] == pytest.approx([row[2] for row in EXPECTED["llama_index"]], abs=1e-5)


def test_a_run_saved_before_resumes_where_it_stopped(saved: Path) -> None:
    config = load_yaml(saved / "run" / "config.yaml")
    config.trainer.resume, config.trainer.total_transitions = True, 8  # resume, and stop where the run stopped
    resumed = Trainer(config, make_two_hop_episodes(30, 0))
    resumed.train()
    assert resumed.resumed_from == Path("run") / "last" and (resumed.transitions, resumed.updates) == (8, 2)
    saved_online = QNetwork.from_pretrained(saved / "run" / "last" / "model").state_dict()
    for name, tensor in resumed.online.state_dict().items():
        assert torch.equal(tensor, saved_online[name]), f"online {name} is not the saved run's"


def test_a_run_saved_before_resumes_to_the_uninterrupted_run(saved: Path) -> None:
    config = load_yaml(saved / "run" / "config.yaml")
    config.trainer.resume = True
    resumed = Trainer(config, make_two_hop_episodes(30, 0))
    resumed.train()
    assert resumed.resumed_from == Path("run") / "last"  # it went on from the saved checkpoint, not from scratch
    config.trainer.output_dir, config.trainer.resume = str(saved / "uninterrupted"), False
    full = Trainer(config, make_two_hop_episodes(30, 0))
    full.train()
    assert resumed.transitions == full.transitions == 16 and resumed.updates == full.updates
    # The first half ran on the machine that wrote the fixture: bit-equal there, equal up to float rounding on a CPU
    # whose kernels (or thread count) sum in another order.
    for (name, a), b in zip(full.online.state_dict().items(), resumed.online.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"online {name} differs after resuming the saved run")
