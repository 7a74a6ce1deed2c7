"""Guards that stop a model from failing silently: cut chunks, corpus order, store metric, mistyped names."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from langchain_core.vectorstores import InMemoryVectorStore

from qrag.integrations import QRAGEmbeddings, QRAGRetriever
from qrag.integrations.langchain_stores import langchain_vector_search
from qrag.training.model.qnet import ChunkLengthWarning, QNetwork
from qrag.training.model.shipped import ShippedNameError, shipped_names
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import CorpusOrderWarning, MultiHopSearcher, load_model

TEXTS = ["Mary went to the kitchen.", "Mary took the milk.", "John is in the garden.", "The milk is cold."]


def test_cut_long_chunks_give_one_warning_with_count_and_excess(tiny_encoder_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=8)
    long = "word " * 20  # 20 tokens + [CLS] + [SEP] = 22: 14 over
    mid = "word " * 10  # 12 tokens: 4 over
    n_tokens = [len(qnet.tokenizer(t)["input_ids"]) for t in (long, mid, TEXTS[0])]
    assert n_tokens[0] == 22 and n_tokens[1] == 12 and n_tokens[2] <= 8
    with pytest.warns(ChunkLengthWarning) as caught:
        ChunkIndex.from_texts(qnet, [long, mid, TEXTS[0]], long_chunks="cut")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "2 of 3 chunks" in message and "max_chunk_tokens=8" in message and "up to 14 tokens" in message
    assert "9 on average" in message
    with pytest.warns(ChunkLengthWarning, match="1 of 1 chunks"):
        QRAGEmbeddings(qnet).embed_documents([long])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # chunks that fit: no warning at all
        ChunkIndex.from_texts(qnet, TEXTS)
        # read by their windows (the default), long chunks are read whole: nothing to warn about either
        index = ChunkIndex.from_texts(qnet, [long, mid, TEXTS[0]])
    assert index.windows is not None and index.windows.owner.tolist() == [0, 0, 0, 0, 0, 1, 1]


def test_position_aware_model_warns_on_an_undeclared_order(tiny_encoder_path: Path, tmp_path: Path) -> None:
    relative = QNetwork.from_encoder(str(tiny_encoder_path), position_mode="relative")
    with pytest.warns(CorpusOrderWarning, match="position_mode='relative'.*ordered=True"):
        MultiHopSearcher(relative, ChunkIndex.from_texts(relative, TEXTS))
    with pytest.warns(CorpusOrderWarning):
        QRAGRetriever.from_texts(TEXTS, relative, k=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ordered = ChunkIndex.from_texts(relative, TEXTS, ordered=True)
        MultiHopSearcher(relative, ordered)
        MultiHopSearcher(relative, ChunkIndex.from_texts(relative, TEXTS), ordered=True)
        QRAGRetriever.from_texts(TEXTS, relative, k=2, ordered=True)
        plain = QNetwork.from_encoder(str(tiny_encoder_path))  # position_mode 'none': order never matters
        MultiHopSearcher(plain, ChunkIndex.from_texts(plain, TEXTS))
        assert ChunkIndex.load(ordered.save(tmp_path / "ix")).ordered  # the declaration is saved with the index


def test_from_vector_store_refuses_cosine(tiny_encoder_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path))
    store = InMemoryVectorStore(QRAGEmbeddings(qnet))
    known = langchain_vector_search(store)[1]
    assert known is not None and known.metric == "cosine"
    with pytest.raises(ValueError, match="InMemoryVectorStore ranks by 'cosine'.*Distance.DOT"):
        QRAGRetriever.from_vector_store(store, qnet, k=2)


def test_mistyped_shipped_name_lists_the_shipped_names() -> None:
    names = shipped_names()
    assert "qrag/babilong-minilm" in names
    with pytest.raises(ShippedNameError, match="qrag/babilong-minlm.*shipped with qrag: .*qrag/babilong-minilm.*Did you mean"):
        load_model("qrag/babilong-minlm")
    with pytest.raises(ValueError, match="not a checkpoint shipped with qrag"):
        QNetwork.from_pretrained("qrag/nothing-like-it")
