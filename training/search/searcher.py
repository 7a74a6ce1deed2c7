"""Multi-hop inference (METHOD.md §4): greedy or beam hops over cached chunk vectors, with the stop rule.

Shape legend: B questions, R state rows (questions × live beams), N chunks, D vector dim, K beam/width.

The hops themselves (rendering, encoding, positions, scoring, masking, greedy and beam hops, the top-up, the stop
rule) are the hop engine's, `qrag.training.search.hops`, the same functions training acts and validates with. This module
turns them into what users call: `MultiHopSearcher` (over a `ChunkIndex` or an external store; persistence) and
`search_many` (one corpus per question, in shared batches). Search settings live in
`qrag.training.search.settings`.

`max_hops` and `stop_threshold` default to the model's own (`QNetwork.hop_settings`: the horizon it was trained for
and the stop threshold calibrated on its validation data, saved with it); a caller's explicit value wins.

How `k`, `max_hops` and `stop_threshold` interact:

- `k=None` (adaptive, the paper's rule): at most `max_hops` hops; stop *before* a hop whose best Q-value
  is below `stop_threshold` (never before `min_hops` hops). The number of results varies per question.
- `k` given (exact count, what LangChain's standard suite and most chains expect): exactly
  `min(k, N)` results. The first `min(k, max_hops)` are hops (each re-encodes the state); the stop rule
  does not cut them. If `k > max_hops` the rest are the best remaining chunks for the state after the
  last hop (one more state encoding, not more hops), with `hop = max_hops`. Every hit the adaptive
  search would not have returned carries `past_stop=True`, so `[h for h in hits if not h.past_stop]`
  is the adaptive answer (exactly, for greedy search with `max_hops ≥` the adaptive hop count).
- `k` given with `fill='question'` (the off-domain guard, METHOD.md §4.4; a model can save it as its default):
  the hops stop where the stop rule says, as in adaptive search, or before the first hop after the first whose
  score is below what the question's own ranking offers there; the rest of the `k` results are that ranking: the
  bare question's state ranked as the first hop ranks it (Q plus the question's lexical evidence, so every hit of
  a search is scored on one scale), flagged `past_stop=True`. `fill='question_unguarded'`: every hop up to `k`,
  then the question's own ranking.

`lexical_weight` ω > 0 (METHOD.md §4.5; saved with models that use it) ranks the chunks of every hop by
Q + ω · BM25 of the state's text, scaled to [0, 1] by the best available chunk: a `Hit` carries that `score`
beside its `q_value`, and the stop rule reads the Q-value. It needs the index's BM25 index (`ChunkIndex.lexical`),
which the searcher builds when the index has none. Over an external store whose documents qrag can read
(`with_lexical`), the store holds the vectors and qrag the BM25 index beside it; over any other store the search
ranks by Q alone and says so once (`LexicalFallbackWarning`).

Beam search (`beam_size > 1`) keeps the `beam_size` hop sequences with the largest total Q over a fixed
horizon, then applies the stop rule along the best sequence; `beam_size=1` is greedy search. Greedy is what
training selects and calibrates for, and with both shipped models it finds more supporting-fact chains than any
wider beam (docs/RESULTS.md, "Beam search against greedy hops").
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from qrag.training.input_checks import check_device
from qrag.training.model.qnet import CONFIG_FILE, QNetwork
from qrag.training.model.shipped import resolve_checkpoint
from qrag.training.model.towers import Precision
from qrag.training.search.filters import Filter, FilterSpec
from qrag.training.search.hops import (
    Beam,
    Corpora,
    Expand,
    FirstRanking,
    Hopped,
    Item,
    beam_hops,
    check_finite_q,
    corpus_expand,
    fill_up,
    greedy_hops,
    question_cut,
    question_fill,
    question_ranking,
    stop_point,
    store_expand,
)
from qrag.training.search.index import Chunk, ChunkIndex, ChunkStore, weighs_pairs
from qrag.training.search.searcher_folder import read_searcher, write_searcher
from qrag.training.search.settings import FROM_MODEL, FromModel, Order, SearchConfig, SearchError
from qrag.training.search.state_batcher import state_batcher
from qrag.training.search.windows import Windows

__all__ = ["FROM_MODEL", "CorpusOrderWarning", "FromModel", "Hit", "LexicalFallbackWarning", "MultiHopSearcher",
           "SearchConfig", "SearchError", "SearchResult", "check_finite_q", "load_model", "search_corpora", "search_many",
           "stop_point"]


class CorpusOrderWarning(UserWarning):
    """A position-aware model searches a corpus whose order was not declared meaningful."""


class LexicalFallbackWarning(UserWarning):
    """A model that weighs lexical evidence searches an external store, which has no lexical search: Q alone ranks."""


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk: the hop that took it, its Q-value, whether the stop rule would drop it, and the score it
    was ranked by (the Q-value plus any lexical evidence, METHOD.md §4.5; None given: the Q-value)."""

    chunk: Chunk
    hop: int
    q_value: float
    past_stop: bool = False
    score: float | None = None

    def __post_init__(self) -> None:
        if self.score is None:
            object.__setattr__(self, "score", self.q_value)


@dataclass(frozen=True)
class SearchResult:
    """The hits of one question in the requested order; `hops_kept` hits pass the stop rule."""

    question: str
    hits: list[Hit]
    hops_kept: int


class MultiHopSearcher:
    """Greedy or beam multi-hop search with the stop rule, over a `ChunkIndex` or any `ChunkStore`.

    Args:
        model: The trained Q-network (put in eval mode: inference never uses dropout).
        store: A `ChunkIndex` built with this model's chunk tower, or a `ChunkStore` (position mode
            'none' only) whose vectors came from it.
        config: Default search settings; each `search` call may override fields.
        ordered: Whether the chunks' order means something (one document in reading order); None: what
            the `ChunkIndex` declares (`ordered=` when it was built). A position-aware model (position_mode
            'relative' or 'absolute') scores chunks by their position, so on a corpus whose order is not
            declared meaningful it warns (`CorpusOrderWarning`): shuffling the same texts would change even
            the first hop. Pass `ordered=True` for one long document, or use a position-free model.

    Raises:
        SearchError: the model's vector dim differs from the index's, or a position-aware model is
            paired with an external store.

    Example:
        >>> from qrag.training.search.index import ChunkIndex
        >>> from qrag.training.model.qnet import QNetwork
        >>> qnet = QNetwork.from_encoder("all-MiniLM-L6-v2")
        >>> texts = ["Mary went to the kitchen.", "Mary took the milk.", "John is in the garden."]
        >>> searcher = MultiHopSearcher(qnet, ChunkIndex.from_texts(qnet, texts))
        >>> result = searcher.search_one("Where is the milk?", k=2)
        >>> [(h.chunk.id, h.hop) for h in result.hits]  # doctest: +SKIP
        [('1', 0), ('0', 1)]
    """

    def __init__(self, model: QNetwork, store: ChunkIndex | ChunkStore, config: SearchConfig | None = None, *,
                 ordered: bool | None = None) -> None:
        self.model = model
        self.store = store
        self.config = (config or SearchConfig()).validate()
        self.mode = model.config.position_mode
        model.eval()
        if isinstance(store, ChunkIndex):
            if store.dim != model.dim:
                raise SearchError(
                    f"the model's vectors have dim {model.dim} but the index holds dim {store.dim} "
                    f"(built with encoder {store.encoder!r}); rebuild the index with this model's chunk tower."
                )
            if self.mode != "none" and not (store.ordered if ordered is None else ordered):
                warnings.warn(
                    f"this model is position-aware (position_mode={self.mode!r}): it scores chunks by their place "
                    f"in the corpus, so the order of these {len(store)} chunks changes its results. If they are one "
                    "document in reading order, declare it (ordered=True when building the index or retriever); "
                    "for a set of passages use a position-free model (position_mode='none').",
                    CorpusOrderWarning, stacklevel=2,
                )
        elif self.mode != "none":
            raise SearchError(
                f"position_mode={self.mode!r} re-rotates every chunk vector at every hop, which an external "
                f"store ({type(store).__name__}) cannot do; use a ChunkIndex (exact, CPU or GPU) for this model."
            )
        elif not callable(getattr(store, "search", None)):
            raise SearchError(f"{type(store).__name__} is not a ChunkStore: it has no search(queries, k, exclude).")
        self._warned_lexical = False
        self._lexical_for(self.config.resolved(model.hop_settings).weight)

    def _lexical_for(self, weight: float) -> float:
        """The lexical weight this searcher can apply: `weight` over a `ChunkIndex` (its BM25 index built the first
        time one is needed), 0 over an external store (which has no lexical search: warned once)."""
        if weight == 0:
            return 0.0
        if isinstance(self.store, ChunkIndex):
            self.store.with_lexical(pairs=weighs_pairs(self.model))
            return weight
        with_lexical = getattr(self.store, "with_lexical", None)  # a store whose documents qrag can read: BM25 here
        if callable(with_lexical) and with_lexical(pairs=weighs_pairs(self.model)):
            return weight
        if not self._warned_lexical:
            self._warned_lexical = True
            warnings.warn(
                f"this search weighs lexical evidence (lexical_weight={weight:g}: BM25 of the state's text beside the "
                f"Q-value), but {type(self.store).__name__} has no lexical search: it ranks by the Q-value alone. For "
                "the model's full search, index the texts in-process (QRAGRetriever.from_texts / ChunkIndex).",
                LexicalFallbackWarning, stacklevel=3,
            )
        return 0.0

    @property
    def index(self) -> ChunkIndex | None:
        """The exact index, or None for an external store."""
        return self.store if isinstance(self.store, ChunkIndex) else None

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path, *, extra_files: Mapping[str, str] | None = None) -> Path:
        """Write `model/` (`save_pretrained`), `index/` (`ChunkIndex.save`), `search.json` and `extra_files`
        (name → text, e.g. an adapter's own JSON) as one atomic write; no pickle.

        The whole folder is built beside `folder`, checked, then swapped in with one rename: a crash, a full
        disk or a kill at any moment leaves the previous save or the new one, never a mix of the two.

        Raises:
            SearchError: the store is external (persist that store itself; only the model is ours), or the
                index was embedded by another chunk tower than this model's.
            FileExistsError: `folder` exists and is neither empty nor an earlier save.
        """
        if not isinstance(self.store, ChunkIndex):
            raise SearchError(
                f"this searcher uses an external store ({type(self.store).__name__}); persist that store itself "
                "and save the model with QNetwork.save_pretrained."
            )
        write_searcher(Path(folder), self.model, self.store, self.config, extra_files)
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path, *, device: str | None = None, encoder: str | None = None) -> MultiHopSearcher:
        """Rebuild a searcher written by `save`; `encoder` relocates a base encoder the checkpoint needs.

        Raises:
            SearchError: the folder or its `search.json` is missing or corrupt, `device` is unusable, or the
                index was embedded by another chunk tower than the saved model's.
            CheckpointError / IndexLoadError: the model or the index part is missing or corrupt.
        """
        check_device(device, SearchError)
        model, index, config, precision = read_searcher(Path(folder), encoder)
        if precision == "fp16" and torch.device(device or "cpu").type == "cpu":
            warnings.warn(f"{folder} was saved serving in fp16, which needs a GPU; it serves in fp32 on this CPU "
                          "(load it with device='cuda', or call model.serve_in('bf16')).", stacklevel=2)
            precision = "fp32"
        model = load_model(model, device=device, precision=precision)  # the saved serving precision, on `device`
        return cls(model, index.to(device) if device else index, config)

    # ------------------------------------------------------------------ public API
    def search_one(self, question: str, *, filter: FilterSpec = None, **overrides: Any) -> SearchResult:
        """`search` for one question."""
        return self.search([question], filter=filter, **overrides)[0]

    def search(self, questions: Sequence[str], *, filter: FilterSpec = None, **overrides: Any) -> list[SearchResult]:
        """Search every question; results equal one-at-a-time search, computed in shared batches.

        Args:
            questions: Non-empty question strings.
            filter: Which chunks the hops may take (`qrag.training.search.filters`): a `Filter`, a dict
                `{key: value}` (every key must match; a list value: any of its items) or a function of the
                metadata dict. Every hop and the top-up take only chunks it allows, so a search returns at most
                as many as match. Over a `ChunkIndex` it is a row mask (cached per filter); an external store is
                handed it to apply in its own search.
            **overrides: Any `SearchConfig` field for this call (k, max_hops, stop_threshold, score_threshold, ...).

        Raises:
            SearchError: an empty or non-string question, or an invalid/unknown argument.
            FilterError: a malformed filter, or metadata it cannot compare.
        """
        where = Filter.coerce(filter)
        cfg = self.config.with_overrides(overrides).resolved(self.model.hop_settings)
        cfg = dataclasses.replace(cfg, lexical_weight=self._lexical_for(cfg.weight))
        if isinstance(questions, str):
            raise SearchError("questions must be a list of strings; for one question use search_one().")
        asked = list(questions)
        for i, question in enumerate(asked):
            if not isinstance(question, str) or not question.strip():
                raise SearchError(f"question {i} must be a non-empty string, got {question!r}.")
        out: list[SearchResult] = []
        # One version of the index from the first hop of the first question to the last: the mask, the vectors,
        # the texts, BM25 and the chunks named all come from it, whatever other threads add or delete meanwhile.
        store = self.store.snapshot() if isinstance(self.store, ChunkIndex) else self.store
        allowed = store.mask(where) if where is not None and isinstance(store, ChunkIndex) else None
        reading = getattr(store, "reading", None)  # an external store held for reading: no write inside a search
        with (reading() if callable(reading) else contextlib.nullcontext()), state_batcher(self.model).searching():
            for start in range(0, len(asked), cfg.batch_size):
                out.extend(self._search_group(store, asked[start : start + cfg.batch_size], cfg, where, allowed))
        return out

    # ------------------------------------------------------------------ the hops
    def _search_group(self, store: ChunkIndex | ChunkStore, questions: list[str], cfg: SearchConfig,
                      where: Filter | None, allowed: torch.Tensor | None) -> list[SearchResult]:
        """Hops from the hop engine: greedy or beam over the index's vectors (a snapshot; the rows `allowed` lets them
        take), or over an external store's ranking (filtered by the store with `where`)."""
        first = _first_ranking(cfg)
        if isinstance(store, ChunkIndex):
            index = store
            corpora = Corpora.shared(index.vectors, index.texts, len(questions), index.lexical, allowed,
                                     _windows_for(self.model, index))
            if cfg.beam_size == 1:
                return _greedy_results(self.model, questions, corpora, [index.chunk] * len(questions), cfg)
            return _beam_results(corpus_expand(self.model, questions, corpora, lexical_weight=cfg.weight, first=first),
                                 questions, corpora.size(0), index.chunk, self.model.config.state_order == "document", cfg)
        return _beam_results(store_expand(self.model, questions, store, where=where, lexical_weight=cfg.weight,
                                          first=first),
                             questions, None,
                             lambda c: c, self.model.config.state_order == "document", cfg)


def search_many(model: QNetwork, questions: Sequence[str], indexes: Sequence[ChunkIndex],
                config: SearchConfig | None = None) -> list[SearchResult]:
    """Greedy search of each question in its own corpus (one haystack per question), in shared batches.

    Result `b` equals `MultiHopSearcher(model, indexes[b], config).search_one(questions[b])` (an index without
    the BM25 index a lexical weight needs gets one, as there); what is shared
    is the work: every hop encodes the states of all live questions in one batch and scores each against its
    own corpus (padded to the longest, so `batch_size` × the longest corpus's vectors are held at once). This
    is how an evaluation over many haystacks runs at batch speed.
    Greedy only (`beam_size=1`); a question whose `k` exceeds `max_hops` is topped up, as `MultiHopSearcher`
    does, from the ranking of its state after the last hop (one more batched state encoding, no further hops).

    Raises:
        SearchError: `beam_size > 1`, mismatched lengths, or an index whose dim differs from the model's.
    """
    cfg = (config or SearchConfig()).validate().resolved(model.hop_settings)
    if cfg.beam_size != 1:
        raise SearchError(f"search_many is greedy: beam_size must be 1, got {cfg.beam_size}; use MultiHopSearcher.")
    if len(questions) != len(indexes):
        raise SearchError(f"got {len(questions)} questions but {len(indexes)} indexes; pass one index per question.")
    for ix in indexes:
        if ix.dim != model.dim:
            raise SearchError(f"the model's vectors have dim {model.dim} but an index holds dim {ix.dim}.")
        if cfg.weight > 0:
            ix.with_lexical(pairs=weighs_pairs(model))
    model.eval()
    views = [ix.snapshot() for ix in indexes]  # each question reads one version of its index throughout
    out: list[SearchResult] = []
    for start in range(0, len(questions), cfg.batch_size):
        group = views[start : start + cfg.batch_size]
        corpora = Corpora.padded([ix.vectors for ix in group], [ix.texts for ix in group], model.device,
                                 [ix.lexical for ix in group], [_windows_for(model, ix) for ix in group])
        out.extend(_greedy_results(model, list(questions[start : start + cfg.batch_size]), corpora,
                                   [ix.chunk for ix in group], cfg))
    return out


def search_corpora(model: QNetwork, questions: Sequence[str], corpora: Corpora,
                   chunk: Sequence[Callable[[int], Chunk]], config: SearchConfig | None = None) -> list[SearchResult]:
    """Greedy search over the hop engine's corpora (`hops.Corpora`: chunk vectors already computed, shared or one
    per question), for callers that hold vectors rather than `ChunkIndex`es (a 10M-token haystack gathered from a
    cache); `chunk[b](row)` names the chunk at a row of question b's corpus. The same results as `search_many`.

    Raises:
        SearchError: `beam_size > 1`, or `chunk` does not give one namer per question.
    """
    cfg = (config or SearchConfig()).validate().resolved(model.hop_settings)
    if cfg.beam_size != 1:
        raise SearchError(f"greedy search only: beam_size must be 1, got {cfg.beam_size}; use MultiHopSearcher.")
    if len(chunk) != len(questions):
        raise SearchError(f"got {len(questions)} questions but {len(chunk)} chunk namers; pass one per question.")
    model.eval()
    return _greedy_results(model, list(questions), corpora, chunk, cfg)


def _greedy_results(model: QNetwork, questions: list[str], corpora: Corpora, chunk: Sequence[Callable[[int], Chunk]],
                    cfg: SearchConfig) -> list[SearchResult]:
    """Greedy search results from the hop engine: hops (the stop rule live when adaptive or guarded), then what
    `_past_hops` fills them with; `chunk[b](row)` is the chunk at a row of question b's corpus. Under a question fill
    the first hop's ranking is kept (`hops.FirstRanking`): it is the question's own ranking, not encoded again."""
    horizons = [_horizon(cfg, corpora.size(b)) for b in range(len(questions))]
    live_stop = cfg.k is None or cfg.guarded  # the stop rule ends the hops (else it only flags them)
    first = _first_ranking(cfg)
    hopped = greedy_hops(model, questions, corpora, horizons, threshold=cfg.threshold if live_stop else None,
                         min_hops=cfg.min_hops, lexical_weight=cfg.weight, first=first)
    expand = corpus_expand(model, questions, corpora, lexical_weight=cfg.weight, first=first)
    kept, extra = _past_hops(expand, [h.taken for h in hopped], [h.scores for h in hopped],
                             [corpora.size(b) for b in range(len(questions))], cfg)
    return [_result(questions[b], _hop_beam(_kept(h, n), chunk[b]), [(chunk[b](i), q, sc) for i, q, sc in more], cfg)
            for b, (h, n, more) in enumerate(zip(hopped, kept, extra, strict=True))]


def _first_ranking(cfg: SearchConfig) -> FirstRanking | None:
    """Where a question fill will rank the rest of `k` by the bare question's state: the first hop's ranking, to be
    kept for it (`hops.FirstRanking`); None otherwise."""
    return FirstRanking(cfg.k) if cfg.k is not None and cfg.by_question else None


def _past_hops(expand: Expand[Item], taken: Sequence[Sequence[Item]], scores: Sequence[Sequence[float]],
               sizes: Sequence[int | None], cfg: SearchConfig, key: Callable[[Item], Hashable] | None = None
               ) -> tuple[list[int], list[list[tuple[Item, float, float]]]]:
    """How many of each question's hops a search keeps, and the (item, Q, score) triples that fill its `k` results
    past them (greedy and beam search alike; `sizes[b]`: question b's corpus, None: unknown; `key(item)` names an
    item, None: the item itself).

    Adaptive search (`k` None) keeps its hops and fills nothing. A question fill ranks the rest by the bare question's
    state as the first hop ranks it (`hops.question_ranking`: Q plus the question's lexical evidence, the hops'
    scale); under the guard a hop that ranking outscores ends the hops (`hops.question_cut`). The state fill ranks
    the rest by the state after the last hop (`hops.fill_up`)."""
    kept = [len(t) for t in taken]
    if cfg.k is None:
        return kept, [[] for _ in taken]
    if not cfg.by_question:
        return kept, fill_up(expand, taken, cfg.k, sizes)
    if not cfg.guarded and all(len(t) >= cfg.k for t in taken):  # every question holds its k hops: nothing to fill
        return kept, [[] for _ in taken]
    ranking = question_ranking(expand, len(taken), cfg.k)
    if cfg.guarded:  # a hop the question's own next passage outscores ends the hops
        kept = [question_cut(row, t, sc, cfg.min_hops, key=key) for row, t, sc in zip(ranking, taken, scores, strict=True)]
    return kept, question_fill(ranking, [t[:n] for t, n in zip(taken, kept, strict=True)], cfg.k, sizes, key=key)


def _kept(hopped: Hopped, n: int) -> Hopped:
    """The first `n` hops of a greedy search."""
    return Hopped(hopped.taken[:n], hopped.q_values[:n], hopped.scores[:n])


def _hop_beam(hopped: Hopped, chunk: Callable[[int], Chunk]) -> Beam[Chunk]:
    """Greedy hops as the chunks they took (a beam of one)."""
    return Beam(tuple(chunk(i) for i in hopped.taken), tuple(hopped.q_values), tuple(hopped.scores))


def _beam_results(expand: Expand[Item], questions: list[str], size: int | None, chunk: Callable[[Item], Chunk],
                  distinct: bool, cfg: SearchConfig) -> list[SearchResult]:
    """Beam search results from the hop engine (greedy when `beam_size=1`): the best beam of each question (a wider
    beam ran its whole horizon: under the guard it is cut where the stop rule does), then what `_past_hops` fills it
    with; `size` is the corpus size (None: an external store's, unknown), `chunk(item)` the chunk an item names,
    `distinct` whether beams must hold distinct sets of chunks (states in document order)."""
    live_stop = cfg.k is None or cfg.guarded
    beams = beam_hops(expand, len(questions), [_horizon(cfg, size)] * len(questions), cfg.beam_size,
                      threshold=cfg.threshold if live_stop else None, min_hops=cfg.min_hops,
                      distinct=(lambda item: chunk(item).id) if distinct else None)
    if cfg.k is not None and cfg.guarded:
        beams = [_cut(beam, stop_point(beam.q_values, cfg.threshold, cfg.min_hops)) for beam in beams]
    kept, extra = _past_hops(expand, [b.taken for b in beams], [b.scores for b in beams], [size] * len(questions), cfg,
                             key=lambda item: chunk(item).id)
    return [_result(question, _cut(Beam(tuple(chunk(i) for i in beam.taken), beam.q_values, beam.scores), n),
                    [(chunk(i), q, sc) for i, q, sc in more], cfg)
            for question, beam, n, more in zip(questions, beams, kept, extra, strict=True)]


def _cut(beam: Beam[Item], n: int) -> Beam[Item]:
    """The first `n` hops of a beam."""
    return Beam(beam.taken[:n], beam.q_values[:n], beam.scores[:n])


def _horizon(cfg: SearchConfig, size: int | None) -> int:
    """Hops a question takes at most: `max_hops`, fewer for an explicit `k` or a smaller corpus."""
    horizon = min(cfg.k, cfg.horizon) if cfg.k is not None else cfg.horizon
    return horizon if size is None else min(horizon, size)


def _result(question: str, hopped: Beam[Chunk], more: Sequence[tuple[Chunk, float, float]],
            cfg: SearchConfig) -> SearchResult:
    """One question's hits: its hops (those past the stop rule flagged, or dropped when `k` is adaptive), then the
    top-up `more` past the last hop."""
    kept = stop_point(hopped.q_values, cfg.threshold, cfg.min_hops)
    hits = [Hit(c, t, q, t >= kept, score)
            for t, (c, q, score) in enumerate(zip(hopped.taken, hopped.q_values, hopped.scores, strict=True))]
    hits += [Hit(c, len(hopped.taken), q, True, score) for c, q, score in more]  # past the last hop
    hits = hits if cfg.k is not None else [h for h in hits if not h.past_stop]
    if cfg.score_threshold is not None:
        hits = [h for h in hits if h.score is not None and h.score >= cfg.score_threshold]
    return SearchResult(question, _ordered(hits, cfg.order), sum(not h.past_stop for h in hits))


def _ordered(hits: list[Hit], order: Order) -> list[Hit]:
    if order == "hop":
        return hits
    return sorted(hits, key=lambda h: (h.chunk.position is None, h.chunk.position or 0, h.hop))


def load_model(model: QNetwork | str | Path, *, device: str | torch.device | None = None,
               precision: Precision = "fp32") -> QNetwork:
    """A `QNetwork` from an instance, a checkpoint folder (`save_pretrained`) or an encoder name/path.

    A folder holding `qrag_config.json`, or the name of a checkpoint shipped with qrag ("qrag/babilong-minilm"),
    loads as a trained checkpoint, ready to serve: its state tower's LoRA adapters are merged into its weights
    (`QNetwork.merge_adapters`: faster hops, inference only) and none of its weights trains (`requires_grad`
    off: the layers a top-layer model left as its base's run once for both terms of its anchor); anything else is passed to
    `QNetwork.from_encoder` (an *untrained* model: both towers are the base encoder, its Q-values are not
    calibrated, so use an explicit `k` rather than the stop rule). An untrained model's chunk tower is marked
    frozen (`train_towers='state'`), so its chunk vectors are keyed by the base encoder and shared with
    checkpoints trained that way, in memory and in a `ChunkVectorFolder`.

    `precision='bf16'` (or 'fp16' on a GPU) serves the state passes from a low-precision copy of the state tower
    (`QNetwork.serve_in`: faster hops on hardware with bf16 units; a passed-in network is changed in place, as by
    `.to(device)`), 'int8' through ONNX Runtime's int8 graphs of both towers on a CPU; 'auto', for a network this
    loads (a passed-in one is left as it serves), on a CPU serves whichever of fp32, int8 and native bf16 a timed
    query runs clearly fastest in, on a GPU bf16 where it is native; the default 'fp32' leaves the network's serving precision as it is. On a CPU, a network this
    loads runs its towers' gradient-free fp32 passes through ONNX Runtime (`QNetwork.serve_engine`; a passed-in one
    keeps torch until its owner calls it; `QRAG_CPU_ENGINE=torch` keeps torch). On a GPU the state passes
    are replayed as CUDA graphs (`QNetwork.serve_graphed`; `QRAG_CUDA_GRAPHS=0` keeps them eager).

    Raises:
        CheckpointError / EncoderLoadError: the path or name cannot be loaded (the message says why).
        TypeError: `model` is none of the accepted types.
        ValueError: an unknown precision, or 'fp16' on a CPU.
    """
    check_device(device)
    if isinstance(model, QNetwork):
        qnet = model
    elif isinstance(model, (str, Path)):
        p = resolve_checkpoint(model)
        # a loaded checkpoint serves: nothing of it trains (its frozen layers are then shared where they can be)
        qnet = (QNetwork.from_pretrained(p).merge_adapters().requires_grad_(False) if (p / CONFIG_FILE).is_file()
                else QNetwork.from_encoder(str(model), train_towers="state"))
    else:
        raise TypeError(
            f"model must be a QNetwork, a checkpoint folder or an encoder name, got {type(model).__name__}."
        )
    qnet = qnet.to(device) if device is not None else qnet
    # 'auto' chooses for what this loads; a network passed in keeps how it serves (a copy made here would not follow
    # later edits of its weights): its owner calls serve_in
    passed_auto = precision == "auto" and isinstance(model, QNetwork)
    if not isinstance(model, QNetwork) and qnet.device.type == "cpu":
        qnet = qnet.eval().serve_engine()  # before serve_in: 'auto' times the fp32 passes as they will run
    qnet = qnet.eval().serve_in(precision) if precision != "fp32" and not passed_auto else qnet
    return qnet.eval().serve_graphed() if qnet.device.type == "cuda" else qnet


def _windows_for(model: QNetwork, index: ChunkIndex) -> Windows | None:
    """The index's long-chunk windows where the model scores without positions (`search.windows`); else None: a
    position-aware model scores each chunk by its one vector."""
    return index.windows if model.config.position_mode == "none" else None
