"""qrag over collections a user already has, against `QRAGRetriever.from_texts` over the same passages.

Shape legend: B questions, N passages, D vector dim.

Every paragraph of a SQuAD-format validation file (SQuADShifts' new_wiki or amazon_reviews; the evaluation-only
files are refused) goes into the collections users build with all-MiniLM-L6-v2 (`MiniLMEmbeddings`, the vectors
sentence-transformers computes) and their stores' default metrics: Chroma (in-process, default 'l2'), LangChain's
`InMemoryVectorStore` (cosine) and FAISS (flat L2). qrag hops over each through `QRAGRetriever.from_vector_store`
with the model's saved settings (its BM25 evidence on), and again with `lexical_weight=0` (Q alone). The
references are `from_texts` as it indexes by default (`long_chunks='windows'`: a passage longer than the model
reads is searched by its best window) and with `long_chunks='cut'` (its first window, which is what a store holds:
one vector per passage, embedded from its first 256 tokens).

Per method, over the drawn questions searched with an explicit k (`retriever.batch(questions, k=k)`): recall@k
(the gold paragraph among the k returned), hit@1 (the first returned is the gold one), and per reference the share
of questions whose returned ids are the reference's in the same order, and the largest |ΔQ| over the positions
where both returned the same id.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from qrag.eval.ordinary_text_data import SquadPool
from qrag.integrations import QRAGRetriever
from qrag.training.model import QNetwork
from qrag.training.model.encoders import bundled_minilm_path

__all__ = ["STORES", "MiniLMEmbeddings", "compare", "run_existing_collections", "table"]


class MiniLMEmbeddings(Embeddings):
    """sentence-transformers' all-MiniLM-L6-v2 (mean pooling, normalised, 256 tokens) from the bundled weights,
    written with transformers alone, independently of qrag's towers: the vectors a user's collection holds when
    it was filled with `HuggingFaceEmbeddings(model_name="sentence-transformers/all-MiniLM-L6-v2")`. Each text's
    vector is remembered, so several stores over the same passages embed them once.

    Example:
        >>> emb = MiniLMEmbeddings()
        >>> len(emb.embed_query("Where is the milk?"))
        384
    """

    def __init__(self, batch_size: int = 64) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = str(bundled_minilm_path())
        self.tokenizer, self.model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
        self.batch_size = batch_size
        self.known: dict[str, list[float]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        new = list(dict.fromkeys(t for t in texts if t not in self.known))
        for start in range(0, len(new), self.batch_size):
            part = new[start : start + self.batch_size]
            with torch.no_grad():
                batch = self.tokenizer(part, padding=True, truncation=True, max_length=256, return_tensors="pt")
                hidden = self.model(**batch).last_hidden_state  # (B, L, D)
                mask = batch["attention_mask"].unsqueeze(-1).float()  # (B, L, 1)
                vectors = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)  # (B, D)
            self.known.update(zip(part, vectors.tolist(), strict=True))
        return [self.known[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def _chroma(texts: list[str], ids: list[str], embeddings: Embeddings) -> Any:
    import chromadb
    from langchain_chroma import Chroma

    return Chroma.from_texts(texts, embeddings, ids=ids, client=chromadb.EphemeralClient(),
                             collection_name=f"c-{uuid.uuid4().hex[:10]}")


def _in_memory(texts: list[str], ids: list[str], embeddings: Embeddings) -> Any:
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(embeddings)
    store.add_texts(texts, ids=ids)
    return store


def _faiss(texts: list[str], ids: list[str], embeddings: Embeddings) -> Any:
    from langchain_community.vectorstores import FAISS

    return FAISS.from_texts(texts, embeddings, ids=ids)


STORES: dict[str, Callable[[list[str], list[str], Embeddings], Any]] = {
    "chroma_l2": _chroma, "in_memory_cosine": _in_memory, "faiss_l2": _faiss}
"""The collections, each built as its tutorials build it (default metric)."""


def compare(got: Sequence[Sequence[Document]], reference: Sequence[Sequence[Document]]) -> dict[str, Any]:
    """How one method's returned lists agree with a reference's, question by question: the share with the same ids in
    the same order, and the largest |ΔQ| where both returned the same id at the same position."""
    same, delta, positions = 0, 0.0, 0
    for a, b in zip(got, reference, strict=True):
        same += [d.id for d in a] == [d.id for d in b]
        for x, y in zip(a, b, strict=False):
            if x.id == y.id:
                delta = max(delta, abs(float(x.metadata["q_value"]) - float(y.metadata["q_value"])))
                positions += 1
    return {"same_ids": same / len(reference), "max_abs_dq": delta, "positions_compared": positions}


def _scores(found: Sequence[Sequence[Document]], gold: Sequence[str], k: int) -> dict[str, float]:
    return {f"recall@{k}": sum(g in [d.id for d in docs[:k]] for docs, g in zip(found, gold, strict=True)) / len(gold),
            "hit@1": sum(docs[:1] != [] and docs[0].id == g for docs, g in zip(found, gold, strict=True)) / len(gold)}


def run_existing_collections(pool: SquadPool, model: QNetwork, *, k: int = 5, stores: Sequence[str] = tuple(STORES),
                             pool_size: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Every method over one SQuAD-format pool (see the module's description).

    Args:
        pool: The passages and drawn questions (`load_squad`).
        model: The qrag model (its chunk tower the untrained normalised all-MiniLM-L6-v2, e.g. qrag/hotpotqa-minilm).
        k: Results per question.
        stores: Which of `STORES` to build.
        pool_size: Search this many passages (every gold passage and the rest drawn with `seed`); None: all.

    Returns:
        {'passages', 'questions', 'long_passages', 'methods': name -> {recall@k, hit@1, seconds, against: reference
        -> compare(...)}}.
    """
    rows = list(range(len(pool.passages)))
    if pool_size is not None and pool_size < len(rows):
        gold = sorted(set(pool.gold))
        rest = sorted(random.Random(seed).sample(sorted(set(rows) - set(gold)), max(0, pool_size - len(gold))))
        rows = sorted(gold + rest)
    texts, ids = [pool.passages[r] for r in rows], [str(r) for r in rows]
    gold_ids, questions = [str(g) for g in pool.gold], list(pool.questions)
    found: dict[str, list[list[Document]]] = {}
    seconds: dict[str, dict[str, float]] = {}

    def search(name: str, retriever: QRAGRetriever, built: float, **opts: Any) -> None:
        start = time.perf_counter()
        found[name] = retriever.batch(questions, k=k, **opts)
        seconds[name] = {"build": built, "search": time.perf_counter() - start}

    for long_chunks in ("windows", "cut"):
        start = time.perf_counter()
        exact = QRAGRetriever.from_texts(texts, model, ids=ids, long_chunks=long_chunks, show_progress=False)
        built = time.perf_counter() - start
        search(f"from_texts_{long_chunks}", exact, built)
        search(f"from_texts_{long_chunks}_q_alone", exact, 0.0, lexical_weight=0.0)
    embeddings = MiniLMEmbeddings()
    start = time.perf_counter()
    embeddings.embed_documents(texts)
    embed_s = time.perf_counter() - start
    for name in stores:
        start = time.perf_counter()
        retriever = QRAGRetriever.from_vector_store(STORES[name](texts, ids, embeddings), model)
        built = time.perf_counter() - start
        search(name, retriever, built)
        search(f"{name}_q_alone", retriever, 0.0, lexical_weight=0.0)
    methods: dict[str, Any] = {}
    for name, docs in found.items():
        alone = name.endswith("_q_alone")
        refs = ("from_texts_windows_q_alone", "from_texts_cut_q_alone") if alone else ("from_texts_windows",
                                                                                      "from_texts_cut")
        methods[name] = {**_scores(docs, gold_ids, k), "seconds": seconds[name],
                         "against": {r: compare(docs, found[r]) for r in refs if r != name}}
    tokenizer, limit = model.tokenizer, model.config.max_chunk_tokens
    return {"passages": len(texts), "questions": len(questions), "file_questions": pool.total_questions, "k": k,
            "long_passages": sum(len(tokenizer(t)["input_ids"]) > limit for t in texts),
            "embed_passages_s": embed_s, "methods": methods}


def table(result: Mapping[str, Any]) -> str:
    """A Markdown table of `run_existing_collections`'s figures."""
    k = result["k"]
    lines = [f"| method | recall@{k} | hit@1 | same ids as from_texts windows / cut | max \\|ΔQ\\| vs cut |",
             "|---|---|---|---|---|"]
    for name, m in result["methods"].items():
        suffix = "_q_alone" if name.endswith("_q_alone") else ""
        against = [m["against"].get(f"from_texts_{r}{suffix}") for r in ("windows", "cut")]
        same = " / ".join("—" if a is None else f"{a['same_ids']:.3f}" for a in against)
        dq = "—" if against[1] is None else f"{against[1]['max_abs_dq']:.1e}"
        lines.append(f"| {name} | {m[f'recall@{k}']:.4f} | {m['hit@1']:.4f} | {same} | {dq} |")
    return "\n".join(lines)
