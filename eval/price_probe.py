"""The price probe: a qrag query beside the retrievers a user runs today, over the same Wikipedia summaries.

`QRAGRetriever.from_texts(summaries, model=..., k=k)` with the model's own search settings, LangChain's
`InMemoryVectorStore` and a Chroma collection's own retriever (`langchain_chroma.Chroma`, its default l2 space),
both filled with the vectors qrag's index holds (its chunk tower is the normalised base MiniLM; `KnownVectors`) and
asking through the bundled all-MiniLM-L6-v2 as a user's chain does (sentence-transformers, `users_embedder`), k = k;
Chroma's retriever again with its questions embedded by qrag's own embedder (ONNX Runtime, the stricter reading);
and the same model over the first Chroma collection (`QRAGRetriever.from_vector_store`: the store path, against
`from_texts`). The questions are qrag-adapt's, built from the
summaries alone (`summaries_and_questions`); each retriever is asked each question once (`query_cost.Fresh`).
Its command line is `scripts/bench_query_cost.py`; the readings are `qrag.eval.query_cost`'s.
"""

from __future__ import annotations

import statistics
import uuid
from collections import Counter
from typing import Any

import torch
from langchain_core.embeddings import Embeddings

from qrag.eval.query_cost import Fresh, counted, pass_counter, price
from qrag.integrations import QRAGEmbeddings, QRAGRetriever
from qrag.training.data.corpus import Corpus
from qrag.training.data.synthetic import make_questions
from qrag.training.data.wiki import read_pages
from qrag.training.model.encoders import BUNDLED_MINILM, bundled_minilm_path
from qrag.training.search import ChunkIndex


def summaries_and_questions(passages: int, queries: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The first `passages` summaries (`Title. text`), the pages of the first `queries` built questions first.

    The questions are qrag-adapt's, built from the summaries alone (`qrag.training.data.synthetic.make_questions`,
    seed 0: fan-outs and in-links over the pages that name one another; no labels, nothing evaluation-only read),
    each with its own pages' titles."""
    pages = read_pages()
    titles = list(pages)
    built = make_questions(Corpus(ids=tuple(titles), texts=tuple(f"{t}. {pages[t].text}" for t in titles),
                                  source="the Wikipedia summaries", titles=tuple(titles)), seed=0)
    asked = [{"question": q.question, "kind": q.kind, "supporting": [titles[r] for r in q.supporting]}
             for q in built[:queries]]
    gold = list(dict.fromkeys(t for q in asked for t in q["supporting"]))
    taken = set(gold)
    order = (gold + [t for t in titles if t not in taken])[:passages]
    return [f"{t}. {pages[t].text}" for t in order], asked


class KnownVectors(Embeddings):
    """A LangChain embedder returning the vectors given for known texts (`known`) and `base`'s for the rest:
    the plain store of a large index is filled with the vectors qrag's index already holds."""

    def __init__(self, base: Embeddings) -> None:
        self.base = base
        self.known: dict[str, list[float]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self.known]
        for t, v in zip(missing, self.base.embed_documents(missing) if missing else [], strict=True):
            self.known[t] = v
        return [self.known.pop(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.base.embed_query(text)




def users_embedder() -> Embeddings:
    """The bundled all-MiniLM-L6-v2 as a user's LangChain chain embeds with it: sentence-transformers through
    `langchain_huggingface.HuggingFaceEmbeddings` (eager torch, normalised vectors).

    Raises:
        ImportError: sentence-transformers or langchain-huggingface is missing (the `eval` extra installs them).
    """
    try:
        from langchain_huggingface import HuggingFaceEmbeddings
    except ImportError as e:
        raise ImportError(f"the price probe's baselines embed through sentence-transformers ({e.name} is missing): "
                          "pip install 'qrag[eval]'") from e
    return HuggingFaceEmbeddings(model_name=str(bundled_minilm_path()), model_kwargs={"device": "cpu"},
                                 encode_kwargs={"normalize_embeddings": True})


def plain_stores(texts: list[str], vectors: torch.Tensor) -> dict[str, Any]:
    """LangChain's `InMemoryVectorStore` and a Chroma collection (its default l2 space) of `texts` holding these chunk
    vectors, their queries embedded as a user's chain does (`users_embedder`), and a second Chroma collection whose
    queries are embedded by qrag's own embedder (`QRAGEmbeddings`: ONNX Runtime on a CPU, as Chroma's own default
    embedding function runs MiniLM): the stricter of the two readings of Chroma's price."""
    from langchain_chroma import Chroma
    from langchain_core.vectorstores import InMemoryVectorStore

    def filled(embedder: Embeddings) -> KnownVectors:
        known = KnownVectors(embedder)
        known.known.update(zip(texts, vectors.tolist(), strict=True))
        return known

    users = users_embedder()
    in_memory = InMemoryVectorStore(filled(users))
    in_memory.add_texts(texts)
    return {"in_memory": in_memory,
            "chroma": Chroma.from_texts(texts, filled(users), collection_name=f"price-{uuid.uuid4().hex[:8]}"),
            "chroma_onnx_query": Chroma.from_texts(texts, filled(QRAGEmbeddings(BUNDLED_MINILM)),
                                                   collection_name=f"price-{uuid.uuid4().hex[:8]}")}


def store_calls(retriever: QRAGRetriever) -> Counter[str]:
    """Counts of what a `from_vector_store` retriever asks its LangChain store from now on: `searches` by vector,
    `lookups` by id (`LangChainChunkStore._lookup`, the chunks that could still reach the top) and the `looked_up`
    ids. A count per store, not per thread: read it over calls that do not overlap."""
    calls: Counter[str] = Counter()
    store = retriever.searcher.store
    search, lookup = store.vector_search, store._lookup  # type: ignore[union-attr]

    def searched(*args: Any, **kwargs: Any) -> Any:
        calls["searches"] += 1
        return search(*args, **kwargs)

    def looked(ids: Any) -> Any:
        calls["lookups"] += 1
        calls["looked_up"] += len(ids)
        return lookup(ids)

    store.vector_search, store._lookup = searched, looked  # type: ignore[union-attr]
    return calls


def run_price(qrag: QRAGRetriever, texts: list[str], asked: list[dict[str, Any]], *, k: int, threads: int,
              callers: int, rounds: int, alone: int, warmup: int = 3) -> dict[str, Any]:
    """qrag (`texts` already indexed) beside `plain_retrievers`, each question of `asked` asked once by each
    (`Fresh.split`: `warmup`, `alone` one at a time, `rounds` rounds of `callers` × 4 questions), one torch intra-op
    pool of `threads`; with qrag's encoder passes, token-layers and hops per one-at-a-time query."""
    index = qrag.searcher.store
    if not isinstance(index, ChunkIndex):
        raise TypeError(f"the price probe reads qrag's in-process index, got {type(index).__name__}")
    fresh = Fresh.split([q["question"] for q in asked], warmup=warmup, alone=alone, rounds=rounds,
                        per_round=4 * callers)
    stores = plain_stores(texts, index.vectors.cpu().float())
    over_store = QRAGRetriever.from_vector_store(stores["chroma"], qrag.searcher.model, k=k)  # the same model
    torch.set_num_threads(threads)
    counter = pass_counter(qrag)
    hops: list[int] = []
    ask = {"qrag": counted(qrag, hops, counter), "qrag_over_chroma": counted(over_store, []),
           **{name: store.as_retriever(search_kwargs={"k": k}).invoke for name, store in stores.items()}}
    passes_before, layers_before = counter.passes, counter.token_layers
    over_calls = store_calls(over_store)
    got = price(ask, fresh, callers=callers)
    calls = len(fresh.warmup) + len(fresh.alone) + sum(map(len, fresh.rounds))
    return {**got, "questions": {"warmup": len(fresh.warmup), "one_at_a_time": len(fresh.alone),
                                 "rounds": len(fresh.rounds), "per_round": 4 * callers, "asked_twice": 0},
            "qrag_encoder_passes_per_query": (counter.passes - passes_before) / calls,
            "qrag_token_layers_per_query": (counter.token_layers - layers_before) / calls,
            "qrag_hops_per_query": statistics.mean(hops), "qrag_hops_histogram": dict(sorted(Counter(hops).items())),
            "qrag_over_chroma_per_query": {name: over_calls[name] / calls
                                           for name in ("searches", "lookups", "looked_up")},
            "questions_embedded_by": {"in_memory": "sentence-transformers (langchain-huggingface)",
                                      "chroma": "sentence-transformers (langchain-huggingface)",
                                      "chroma_onnx_query": "QRAGEmbeddings (" + qrag_engine(stores) + ")",
                                      "qrag": serving_of(qrag), "qrag_over_chroma": serving_of(over_store)},
            "questions_asked": [q["question"] for q in asked]}


def serving_of(retriever: QRAGRetriever) -> str:
    """What runs a qrag retriever's state passes: its model's own towers in their serving precision, and what runs
    them (`QNetwork.serving_why`, `engine_why`); the store path embeds its questions as `from_texts` does."""
    model = retriever.searcher.model
    return f"qrag's towers, {model.serving_precision} ({model.serving_why}; {model.engine_why})"


def qrag_engine(stores: dict[str, Any]) -> str:
    """What runs the passes of the embedder behind `stores['chroma_onnx_query']` (`QNetwork.engine_why`)."""
    return str(stores["chroma_onnx_query"].embeddings.base.model.engine_why)
