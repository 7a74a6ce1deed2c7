"""Retrievers compared by `qrag-eval`, all behind one interface: `retrieve(episodes) -> list[Retrieval]`.

Each episode is its own corpus (its chunks in document order); a retriever returns, per episode, the
chunk indices it picked, best first, with the hops and Q-values where it has them.

Retrieval budget (the fair-comparison rule): a non-adaptive method returns exactly `k` chunks per
question, with `k` = the episode's number of gold supporting chunks |SF| by default (`budget=None`) or a
fixed number. At k = |SF| precision equals recall, so Fact F1 and Fact EM measure the same thing for
every method and no method wins by returning more text. Only `qrag+stop` is adaptive: it stops where its
Q-values fall below `stop_threshold` (at most `max_hops` hops), which is the stop rule's effect we report.

`encoder_calls` counts query-side (state-tower) encodings per question; chunk vectors are computed once
per corpus and not counted (a deployed index holds them already).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from qrag.eval.methods import ADAPTIVE, BASELINES, FLOORS, METHODS, NEEDS_CHECKPOINT
from qrag.training.data import Episode
from qrag.training.model.qnet import CONFIG_FILE, QNetwork
from qrag.training.model.shipped import resolve_checkpoint, shipped_names
from qrag.training.search import hops
from qrag.training.search.chunk_vectors import ChunkVectorCache, ChunkVectorFolder
from qrag.training.search.index import ChunkIndex
from qrag.training.search.lexical import corpus_lexical, reciprocal_rank_fusion
from qrag.training.search.searcher import (
    FROM_MODEL,
    FromModel,
    SearchConfig,
    SearchResult,
    load_model,
    search_many,
)
from qrag.training.search.settings import Fill

__all__ = ["ADAPTIVE", "BASELINES", "FLOORS", "METHODS", "NEEDS_CHECKPOINT", "make_retrievers"]


@dataclass(frozen=True)
class Retrieval:
    """What one retriever returned for one episode."""

    indices: list[int]
    """Retrieved chunk indices into `episode.chunks`, best (or first hop) first."""
    hops: int
    """Hops taken (state encodings that picked a chunk); 0 for single-shot methods."""
    q_values: list[float]
    """Score of each retrieved chunk (Q-value, inner product or BM25 score)."""
    encoder_calls: int
    """Query-side encoder passes for this question."""
    seconds: float
    """Wall-clock retrieval time for this question; building the chunk index of the corpus is not included.
    Questions retrieved together share their batch's time equally."""
    index_s: float = 0.0
    """Seconds spent computing this question's chunk vectors (those no earlier question had needed)."""
    chunks_embedded: int = 0
    """Chunks whose vectors were computed for this question (0 when every one came from the cache)."""


class Retriever(Protocol):
    """The interface every baseline implements."""

    name: str

    def retrieve(self, episodes: Sequence[Episode]) -> list[Retrieval]: ...


def _budget(episode: Episode, budget: int | None) -> int:
    k = len(episode.supporting) if budget is None else budget
    return max(1, min(k, episode.num_chunks))


class OracleRetriever:
    """Exactly the gold chunks (the reader's ceiling)."""

    name = "oracle"

    def retrieve(self, episodes: Sequence[Episode]) -> list[Retrieval]:
        return [Retrieval(list(e.supporting), 0, [1.0] * len(e.supporting), 0, 0.0) for e in episodes]


class BM25Retriever:
    """Okapi BM25 over the episode's chunks (`LexicalIndex`: bm25s, English stop words), top `k`. Episodes that share
    one corpus (an open pool) share its index."""

    name = "bm25"

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget

    def retrieve(self, episodes: Sequence[Episode]) -> list[Retrieval]:
        out = []
        for ep in episodes:
            start = time.perf_counter()
            top, rows = corpus_lexical(tuple(ep.chunks)).top([ep.question], _budget(ep, self.budget))  # (1, k) each
            out.append(Retrieval(rows[0].tolist(), 0, top[0].tolist(), 0, time.perf_counter() - start))
        return out


def _stable_top(scores: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """The k best of (N,) scores, best first, ties by position."""
    order = torch.sort(scores, descending=True, stable=True).indices[:k]  # (k,)
    return [float(scores[i]) for i in order], [int(i) for i in order]


class _IndexCache:
    """Chunk indexes for the episodes being evaluated, with chunk vectors cached by text per chunk tower.

    A chunk vector depends only on the chunk tower and the chunk's text, and haystacks built from the same
    books share most of their sentences, so a sweep embeds each distinct sentence once per chunk tower
    (`ChunkVectorCache`) instead of once per episode (the 32K cells go from hours to minutes on a CPU).
    Methods whose models share a chunk tower (`QNetwork.chunk_vectors_key`) share the vectors. A tower
    without a given store takes its cache from `folder` (kept between runs) or starts an empty one.
    """

    def __init__(self, stores: Sequence[ChunkVectorCache] = (), max_texts: int = 1_000_000,
                 folder: ChunkVectorFolder | None = None) -> None:
        self.max_texts, self.folder = max_texts, folder
        self._key: tuple[str, str, int] | None = None
        self._index: ChunkIndex | None = None
        self._stores = {s.key: s for s in stores}

    def get(self, model: QNetwork, episode: Episode) -> ChunkIndex:
        """The episode's index."""
        return self._fetch(model, episode)[0]

    def indexes(self, model: QNetwork, episodes: Sequence[Episode]) -> tuple[list[ChunkIndex], list[tuple[float, int]]]:
        """Each episode's index, and the (seconds, chunks embedded) its vectors cost."""
        fetched = [self._fetch(model, ep) for ep in episodes]
        return [index for index, _, _ in fetched], [(seconds, n) for _, seconds, n in fetched]

    def _fetch(self, model: QNetwork, episode: Episode) -> tuple[ChunkIndex, float, int]:
        """The episode's index, with the seconds and the number of chunks its new vectors took (0 when reused)."""
        tower = model.chunk_vectors_key()
        key = (tower, episode.id, hash(episode.chunks))
        if key == self._key and self._index is not None:
            return self._index, 0.0, 0
        if tower not in self._stores:
            self._stores[tower] = (self.folder.get(tower) if self.folder is not None
                                   else ChunkVectorCache(tower, max_texts=self.max_texts))
        store = self._stores[tower]
        texts = list(episode.chunks)
        before, start = len(store), time.perf_counter()
        vectors = store.vectors(model, texts)
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
        seconds, embedded = time.perf_counter() - start, len(store) - before
        self._index, self._key = ChunkIndex(vectors, texts, encoder=model.config.encoder), key
        return self._index, seconds, embedded


class DenseRetriever:
    """Single-hop dense top-k: state tower on the question alone, chunk tower on the chunks.

    'dense' ranks by the inner product, qrag's Q-value before any training; 'cosine' (`cosine=True`) by the
    cosine of the same vectors, what a vector store with a cosine metric does with the base encoder.
    """

    def __init__(self, model: QNetwork, budget: int | None = None, cache: _IndexCache | None = None,
                 name: str = "dense", cosine: bool = False) -> None:
        self.model, self.budget, self.name, self.cosine = model.eval(), budget, name, cosine
        self._cache = cache or _IndexCache()

    def rankings(self, episodes: Sequence[Episode]) -> list[tuple[torch.Tensor, tuple[float, int], float]]:
        """Per episode: the (N,) scores of every chunk, the (seconds, chunks embedded) of its vectors, and the
        question's share of the scoring time."""
        indexes, costs = self._cache.indexes(self.model, episodes)
        start = time.perf_counter()
        out = []
        with torch.no_grad():
            questions = [ep.question for ep in episodes]
            states = hops.encode_states(self.model, questions, [[] for _ in episodes])  # (B, D)
            for ep, index, state in zip(episodes, indexes, states, strict=True):
                vectors = index.vectors  # (N, D)
                if self.cosine:  # a rotation keeps norms, so normalising before it is normalising after it
                    state, vectors = F.normalize(state, dim=-1), F.normalize(vectors, dim=-1)
                corpus = hops.Corpora.shared(vectors, index.texts, 1)
                scores, _ = hops.q_values(self.model, state[None], corpus, [0], [[]], names=[ep.question])  # (1, N)
                out.append(scores[0].float().cpu())
        each = (time.perf_counter() - start) / max(1, len(episodes))
        return [(scores, cost, each) for scores, cost in zip(out, costs, strict=True)]

    def retrieve(self, episodes: Sequence[Episode]) -> list[Retrieval]:
        out = []
        for ep, (scores, cost, seconds) in zip(episodes, self.rankings(episodes), strict=True):
            top, rows = scores.topk(_budget(ep, self.budget))  # (k,)
            out.append(Retrieval([int(r) for r in rows.tolist()], 0, [float(q) for q in top.tolist()], 1, seconds,
                                 *cost))
        return out


class HybridRetriever:
    """BM25 and cosine search with the same base encoder, fused by reciprocal rank (c = 60, equal weights) over
    each one's whole ranking: what LangChain's `EnsembleRetriever` over BM25 and a vector store and LlamaIndex's
    `QueryFusionRetriever` with `reciprocal_rerank` do. Scores are the fused ones."""

    name = "hybrid"

    def __init__(self, cosine: DenseRetriever, budget: int | None = None) -> None:
        self.cosine, self.budget = cosine, budget

    def retrieve(self, episodes: Sequence[Episode]) -> list[Retrieval]:
        dense = self.cosine.rankings(episodes)
        out = []
        for ep, (scores, cost, seconds) in zip(episodes, dense, strict=True):
            start = time.perf_counter()
            bm25 = corpus_lexical(tuple(ep.chunks)).scores([ep.question])[0]  # (N,)
            top, rows = _stable_top(reciprocal_rank_fusion([bm25, scores]), _budget(ep, self.budget))
            out.append(Retrieval(rows, 0, top, 1, seconds + time.perf_counter() - start, *cost))
        return out


class MultiHopRetriever:
    """`MultiHopSearcher` over the episode's chunks: untrained towers ('multihop') or a checkpoint ('qrag').

    Args:
        model: The Q-network.
        budget: Fixed result count, or None for |SF|; ignored when `adaptive`. The first `max_hops` results
            are hops; any more are the best remaining chunks for the state after the last hop.
        adaptive: Let the stop rule decide how many hops (k=None).
        max_hops: Most hops per question; None: the model's trained horizon (`QNetwork.hop_settings`).
        stop_threshold: The stop rule's threshold (adaptive search, and the guard's); 'model': the model's saved
            threshold.
        fill: What ranks the results past the hops (`SearchConfig.fill`); 'model': the model's saved choice.
        lexical_weight: Weight of lexical evidence at every hop (`SearchConfig.lexical_weight`); 'model': the
            model's saved weight.
    """

    def __init__(self, model: QNetwork, *, name: str, budget: int | None = None, adaptive: bool = False,
                 max_hops: int | None = None, stop_threshold: float | FromModel | None = FROM_MODEL,
                 fill: Fill | FromModel = FROM_MODEL, lexical_weight: float | FromModel = FROM_MODEL,
                 cache: _IndexCache | None = None) -> None:
        self.model, self.name, self.budget, self.adaptive = model.eval(), name, budget, adaptive
        cfg = (SearchConfig(max_hops=max_hops, stop_threshold=stop_threshold, fill=fill,
                            lexical_weight=lexical_weight).validate().resolved(model.hop_settings))
        self.max_hops, self.stop_threshold, self.fill = cfg.horizon, cfg.threshold, cfg.fill
        self.lexical_weight = cfg.weight
        self._cache = cache or _IndexCache()

    def retrieve(self, episodes: Sequence[Episode]) -> list[Retrieval]:
        indexes, costs = self._cache.indexes(self.model, episodes)
        start = time.perf_counter()
        budgets = [None if self.adaptive else _budget(ep, self.budget) for ep in episodes]
        results: list[SearchResult | None] = [None] * len(episodes)
        for k in dict.fromkeys(budgets):  # questions with the same budget search together
            cfg = SearchConfig(k=k, max_hops=self.max_hops, stop_threshold=self.stop_threshold, fill=self.fill,
                               lexical_weight=self.lexical_weight)
            group = [i for i, b in enumerate(budgets) if b == k]
            found = search_many(self.model, [episodes[i].question for i in group], [indexes[i] for i in group], cfg)
            for i, result in zip(group, found, strict=True):
                results[i] = result
        each = (time.perf_counter() - start) / max(1, len(episodes))
        out = []
        guarded = self.fill == "question" and not self.adaptive
        for ep, result, cost in zip(episodes, results, costs, strict=True):
            assert result is not None
            hopped = result.hops_kept if guarded else min(len(result.hits), self.max_hops)
            if self.adaptive:
                # The hop whose Q fell below the threshold was encoded too, unless the search ran out of hops.
                calls = min(result.hops_kept + 1, self.max_hops, ep.num_chunks)
            else:
                # Past its hops the searcher tops up from one more encoding (the last state, or under the guard
                # the bare question, after the refused hop's state); no further hops.
                refused = 1 if guarded and hopped < min(self.max_hops, len(result.hits)) else 0
                calls = hopped + refused + (1 if len(result.hits) > hopped else 0)
            out.append(Retrieval([int(h.chunk.id) for h in result.hits], hopped, [h.q_value for h in result.hits],
                                 calls, each, *cost))
        return out


def _untrained(encoder: str | QNetwork, trained: QNetwork | None, device: str | None) -> QNetwork:
    """The untrained baselines' model; beside a trained one it reads chunks as far (with the same scale and
    normalisation), so dense search and the trained model's first hop see the same passage text (and share
    vectors when the trained chunk tower is the frozen base). With a normalising model, 'dense' is 'cosine'."""
    if isinstance(encoder, QNetwork) or trained is None:
        return load_model(encoder, device=device)
    qnet = QNetwork.from_encoder(encoder, train_towers="state", max_chunk_tokens=trained.config.max_chunk_tokens,
                                 scale=trained.config.scale, normalize=trained.config.normalize)
    return qnet.to(device) if device is not None else qnet


def _init_model(trained: QNetwork, checkpoint: str | QNetwork | None, device: str | None) -> QNetwork:
    """The model `trained` was fine-tuned from (its `model.init`), loaded to serve.

    Raises:
        ValueError: `trained` records none (it was trained from the bare encoder).
    """
    if trained.config.init is None:
        name = checkpoint if isinstance(checkpoint, str) else "the checkpoint"
        raise ValueError(f"method 'init' searches with the model --model was fine-tuned from, but {name!r} records "
                         "none (it was trained from the bare encoder, not with qrag-train --init); drop 'init'.")
    return load_model(trained.config.init, device=device)


def _is_checkpoint(checkpoint: str | QNetwork) -> bool:
    return isinstance(checkpoint, QNetwork) or (resolve_checkpoint(checkpoint) / CONFIG_FILE).is_file()


def make_retrievers(
    methods: Sequence[str],
    *,
    encoder: str | QNetwork = "all-MiniLM-L6-v2",
    checkpoint: str | QNetwork | None = None,
    budget: int | None = None,
    max_hops: int | None = None,
    stop_threshold: float | None = None,
    fill: Fill | FromModel = FROM_MODEL,
    lexical_weight: float | FromModel = FROM_MODEL,
    device: str | None = None,
    chunk_caches: Sequence[ChunkVectorCache] = (),
    chunk_vectors: ChunkVectorFolder | None = None,
) -> list[Retriever]:
    """Build the named retrievers, sharing one untrained model and one index cache.

    Args:
        methods: Names from `METHODS`.
        encoder: Encoder name/path for the untrained baselines (dense, multihop), or an untrained `QNetwork`;
            a name beside a checkpoint keeps the checkpoint's `max_chunk_tokens` and `scale`.
        checkpoint: A trained Q-RAG checkpoint folder (`QNetwork.save_pretrained`) or `QNetwork`, needed by
            the qrag methods; given, it also sets how far the baselines read and how far multi-hop goes, whether
            its own methods run in the same call or not.
        budget: Results per question for non-adaptive methods (None: |SF|).
        max_hops: Most hops for the multi-hop methods; None: the trained checkpoint's horizon (the untrained
            baseline gets the same, so both search equally far), else `HopSettings`' default.
        stop_threshold: The stop rule's threshold for 'qrag+stop' and the guard (`fill='question'`); None: the
            checkpoint's saved threshold.
        fill: What ranks the qrag methods' results past their hops ('state', 'question': the off-domain guard,
            'question_unguarded'); 'model': the checkpoint's saved choice.
        lexical_weight: The qrag methods' weight of lexical evidence at every hop; 'model': the checkpoint's.
        device: Torch device for the encoders (default: CPU).
        chunk_caches: Chunk vectors already computed, one cache per chunk tower (a model trained with
            `train_towers='state'` and its untrained start share one).
        chunk_vectors: Where the caches of the other chunk towers are kept between runs (the caller saves
            it, `ChunkVectorFolder.save`); None: in memory only.

    Raises:
        ValueError: an unknown method, or a qrag method without a checkpoint.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; valid methods: {', '.join(METHODS)}.")
    if any(m in NEEDS_CHECKPOINT for m in methods) and checkpoint is None:
        raise ValueError(f"methods {list(NEEDS_CHECKPOINT)} need a trained checkpoint: pass --model PATH.")
    if isinstance(checkpoint, str) and any(m in NEEDS_CHECKPOINT for m in methods):
        folder = resolve_checkpoint(checkpoint)
        if not (folder / CONFIG_FILE).is_file():
            raise ValueError(
                f"--model {checkpoint!r} is not a trained qrag checkpoint (no {CONFIG_FILE} there); pass the "
                f"folder written by qrag-train / QNetwork.save_pretrained, or a shipped name ({', '.join(shipped_names())})."
            )
    cache = _IndexCache(chunk_caches, folder=chunk_vectors)
    untrained: QNetwork | None = None
    trained: QNetwork | None = None
    out: list[Retriever] = []
    if checkpoint is not None and (any(m in NEEDS_CHECKPOINT for m in methods) or _is_checkpoint(checkpoint)):
        # Loaded for the baselines alone too: they read passages as far as the checkpoint does, so their figures
        # are the same whether the checkpoint's own methods run in the same sweep or not.
        trained = load_model(checkpoint if isinstance(checkpoint, QNetwork) else str(checkpoint), device=device)
        max_hops = trained.hop_settings.max_hops if max_hops is None else max_hops
    threshold: float | FromModel = FROM_MODEL if stop_threshold is None else stop_threshold
    with torch.no_grad():
        for m in methods:
            if m in ("dense", "cosine", "hybrid", "multihop") and untrained is None:
                untrained = _untrained(encoder, trained, device)
            if m == "oracle":
                out.append(OracleRetriever())
            elif m == "bm25":
                out.append(BM25Retriever(budget))
            elif m in ("dense", "cosine"):
                assert untrained is not None
                out.append(DenseRetriever(untrained, budget, cache, name=m, cosine=m == "cosine"))
            elif m == "hybrid":
                assert untrained is not None
                out.append(HybridRetriever(DenseRetriever(untrained, budget, cache, name="cosine", cosine=True), budget))
            elif m == "multihop":
                assert untrained is not None
                out.append(MultiHopRetriever(untrained, name=m, budget=budget, max_hops=max_hops, cache=cache))
            elif m == "init":
                assert trained is not None
                out.append(MultiHopRetriever(_init_model(trained, checkpoint, device), name=m, budget=budget, cache=cache))
            else:
                assert trained is not None
                out.append(MultiHopRetriever(trained, name=m, budget=budget, adaptive=m in ADAPTIVE,
                                             max_hops=max_hops, stop_threshold=threshold, fill=fill,
                                             lexical_weight=lexical_weight, cache=cache))
    return out
