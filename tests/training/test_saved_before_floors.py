"""Everything saved before the core moved into floors still loads and answers as it did: a model folder, a
LangChain retriever, a LlamaIndex persist folder, and a training run resumed (tests/fixtures/saved_before_floors).

The fixture's tokenizer knows no word of its texts (each is [UNK]), so texts of one length are one text to its model:
their chunk vectors are equal and which of them a hop takes is float rounding, which differs between CPUs. Answers
are compared hop by hop up to such ties (`TIE`): the chunk taken is one the model cannot tell from the one taken
when the fixture was written, and its Q-value is that hop's to within `TIE`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from qrag.training.learn.config import load_yaml
from qrag.training.learn.trainer import Trainer
from qrag.training.model import QNetwork
from tests.training.learn.two_hop import make_two_hop_episodes

SAVED = Path(__file__).resolve().parents[1] / "fixtures" / "saved_before_floors"
EXPECTED = json.loads((SAVED / "expected.json").read_text())
# Scores of one model and one folder agree to about 1e-9 across CPUs and thread counts (the order a kernel sums in);
# the chunks this model tells apart differ by at least 1.8e-3 at every hop of the expected answers.
TIE = 1e-5


@pytest.fixture()
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the folders (loading may recover an interrupted save in place), as the working directory: the
    run names its encoder by the relative path `encoder`."""
    copy = tmp_path / "saved"
    shutil.copytree(SAVED, copy)
    monkeypatch.chdir(copy)
    return copy


def _saved_index(folder: Path) -> tuple[dict[str, str], dict[str, int]]:
    """The saved index of a retriever folder: each chunk id's text, and its tie class (the first row whose saved
    vector equals its own to within `TIE`; chunks of one class are one text to the model)."""
    index = json.loads((folder / "index" / "index.json").read_text())
    (vectors,) = load_file(str(folder / "index" / index["vector_file"])).values()  # (N, D)
    classes = {}
    for i, chunk_id in enumerate(index["ids"]):
        classes[chunk_id] = next(j for j in range(i + 1) if torch.allclose(vectors[j], vectors[i], rtol=0, atol=TIE))
    return dict(zip(index["ids"], index["texts"], strict=True)), classes


def _assert_as_it_did(ids: Sequence[str], q_values: Sequence[float], expected_ids: Sequence[str],
                      expected_q: Sequence[float], classes: dict[str, int]) -> None:
    """The same hops up to ties: distinct chunks, each of the expected chunk's tie class, with its Q-value."""
    assert len(set(ids)) == len(ids)
    assert [classes[i] for i in ids] == [classes[i] for i in expected_ids], (ids, expected_ids)
    assert list(q_values) == pytest.approx(list(expected_q), abs=TIE)


def test_the_expected_answers_rank_only_what_the_model_tells_apart(saved: Path) -> None:
    """At each hop of the expected answers, every chunk of another tie class scores lower by far more than `TIE`,
    and the chunks of one class score alike: comparing up to ties checks the ranking everywhere it means anything."""
    qnet = QNetwork.from_pretrained(saved / "model").eval()
    answers = {"langchain_retriever": [row[0] for row in EXPECTED["langchain"]],
               "llama_index_persist": [row[0] for row in EXPECTED["llama_index"]]}
    for folder, expected_ids in answers.items():
        texts, classes = _saved_index(saved / folder)
        ids = list(texts)
        chunks = qnet.embed_chunks(list(texts.values()))  # (N, D)
        for hop, best in enumerate(expected_ids):
            with torch.no_grad():
                state = qnet.embed_states([EXPECTED["question"]], [[texts[i] for i in expected_ids[:hop]]])  # (1, D)
                q = dict(zip(ids, qnet.score(state, chunks)[0].tolist(), strict=True))  # untaken chunks below
            untaken = [i for i in ids if i not in expected_ids[:hop]]
            tied = [i for i in untaken if classes[i] == classes[best]]
            others = [q[i] for i in untaken if classes[i] != classes[best]]
            assert max(q[i] for i in tied) - min(q[i] for i in tied) < TIE, (folder, hop, q)
            assert q[best] - max(others) > 100 * TIE, (folder, hop, q)


def test_a_model_folder_loads_and_retrieves_as_it_did(saved: Path) -> None:
    from qrag.integrations import QRAGRetriever

    qnet = QNetwork.from_pretrained(saved / "model")
    retriever = QRAGRetriever.load_local(saved / "langchain_retriever")
    assert torch.equal(qnet.embed_chunks(["bob has the cup."]), retriever.searcher.model.embed_chunks(["bob has the cup."]))
    texts = retriever.searcher.index.texts  # type: ignore[union-attr]
    fresh = QRAGRetriever.from_texts(texts, model=qnet, ids=[f"d{i}" for i in range(len(texts))], k=2, max_hops=2)
    docs = fresh.invoke(EXPECTED["question"])
    _, classes = _saved_index(saved / "langchain_retriever")
    _assert_as_it_did([d.id for d in docs], [d.metadata["q_value"] for d in docs],
                      [row[0] for row in EXPECTED["langchain"]], EXPECTED["langchain_q_values"], classes)


def test_a_langchain_retriever_saved_before_loads(saved: Path) -> None:
    from qrag.integrations import QRAGRetriever

    docs = QRAGRetriever.load_local(saved / "langchain_retriever").invoke(EXPECTED["question"])
    texts, classes = _saved_index(saved / "langchain_retriever")
    _assert_as_it_did([d.id for d in docs], [d.metadata["q_value"] for d in docs],
                      [row[0] for row in EXPECTED["langchain"]], EXPECTED["langchain_q_values"], classes)
    assert [d.metadata["hop"] for d in docs] == [0, 1] and [d.metadata["past_stop"] for d in docs] == [False, True]
    # Each document is its saved chunk: text and metadata stayed with their id (d<i> was saved with source s<i>).
    assert [[d.page_content, d.metadata["source"]] for d in docs] == [[texts[d.id], f"s{d.id[1:]}"] for d in docs]


def test_a_llama_index_persist_folder_saved_before_loads(saved: Path) -> None:
    from qrag.integrations import QRAGLlamaIndexRetriever

    nodes = QRAGLlamaIndexRetriever.from_persist_dir(saved / "llama_index_persist").retrieve(EXPECTED["question"])
    _, classes = _saved_index(saved / "llama_index_persist")
    _assert_as_it_did([n.node.node_id for n in nodes], [n.score for n in nodes],
                      [row[0] for row in EXPECTED["llama_index"]], [row[2] for row in EXPECTED["llama_index"]], classes)
    docstore = json.loads((saved / "llama_index_persist" / "docstore.json").read_text())["docstore/data"]
    assert [n.node.get_content() for n in nodes] == [docstore[n.node.node_id]["__data__"]["text"] for n in nodes]


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
