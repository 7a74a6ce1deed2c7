"""The hop engine (METHOD.md §1, §2, §4): the one place where states become hops, for training and serving.

Shape legend: B questions, R state rows (some of the questions, or questions × beams), N chunks (the longest
corpus when each question has its own), D vector dim, K width.

One hop, for every live state at once:

1. render the state: the question, then the taken chunks' texts in the model's state order (§1);
2. encode it with the state tower f_θ (`encode_states`);
3. place every chunk relative to what was taken (§2.3) and rotate the cached, unrotated chunk vectors g_φ(c)
   by those positions; score Q = ⟨f_θ(s), R(pos)·g_φ(c)⟩; mask the taken chunks and padding (`q_values`); a
   model with lexical evidence (§4.5) ranks by Q + ω · BM25 of the state's text over the corpus, scaled to [0, 1]
   (`hop_scores`), and keeps Q for the stop rule;
4. act: the trainer samples from these scores (`acting.score_step`); evaluation and serving take the argmax
   (`greedy_hops`) or keep the best few sequences (`beam_hops`), and stop where the stop rule says
   (`stop_point`, §4); `fill_up` ranks the chunks left after the last hop when a caller asks for more, by the
   last state (`corpus_expand`, `store_expand`), or a question fill (§4.4) by the bare question's state as the
   first hop ranks it, on the hops' scale (`question_ranking`, `question_fill`; the guard also ends the hops where
   that ranking outscores a hop, `question_cut`).

Steps 1–3 for some state rows are an `Expand`: `corpus_expand` scores the hop engine's `Corpora` (cached chunk
vectors, any position mode), `store_expand` asks an external `ChunkStore` (position mode 'none').
Training, validation, `search_many`, `MultiHopSearcher` and the eval baselines all call these functions, so
the hops a model is served with are the hops it was trained and selected with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

import torch

from qrag.training.model.config import StateOrder
from qrag.training.model.positions import ROTATE_BUDGET, budget_rows, fused_scoring, rotate_halves
from qrag.training.model.qnet import QNetwork
from qrag.training.search.filters import Filter
from qrag.training.search.index import Chunk, ChunkStore
from qrag.training.search.lexical import LexicalIndex, lexical_evidence, state_text
from qrag.training.search.settings import FROM_MODEL, FromModel, Order, SearchConfig, SearchError
from qrag.training.search.state_batcher import state_batcher
from qrag.training.search.windows import Windows, best_window_scores

__all__ = ["FROM_MODEL", "ROTATE_BUDGET", "Beam", "Corpora", "Expand", "FirstRanking", "FromModel", "Hopped", "Item",
           "Order",
           "SearchConfig", "SearchError", "beam_hops", "check_finite_q", "corpus_expand", "encode_states",
           "fill_up", "greedy_hops", "hop_scores", "q_values", "question_cut", "question_fill",
           "question_ranking", "state_pieces", "stop_point", "stops", "store_expand", "top_up"]

Item = TypeVar("Item")  # what a hop takes: a row of the hop engine's corpora (int) or an external store's Chunk


@dataclass(frozen=True)
class Corpora:
    """What hops are scored against: one corpus every question searches, or one corpus per question.

    Attributes:
        vectors: (N, D) unrotated chunk vectors of a shared corpus, or (B, N, D) one corpus per question,
            zero-padded to the longest.
        texts: Per question, its corpus's chunk texts (the states render them).
        valid: (B, N) real rows of per-question corpora; None for a shared corpus (every row is real).
        lexical: Per question, the BM25 index of its corpus (needed where a search weighs lexical evidence, §4.5);
            None: none of them has one.
        allowed: (N,) the rows of a shared corpus a metadata filter lets the hops take (a mask, never a copy of
            the vectors); None: every row.
        windows: Per question, the later windows of its corpus's long chunks (`search.windows`: a chunk scores its
            best window's Q); None: every chunk is scored by its one vector. Position mode 'none' only.
    """

    vectors: torch.Tensor
    texts: Sequence[Sequence[str]]
    valid: torch.Tensor | None = None
    lexical: Sequence[LexicalIndex | None] | None = None
    allowed: torch.Tensor | None = None
    windows: Sequence[Windows | None] | None = None

    def __post_init__(self) -> None:
        if self.allowed is not None and (self.vectors.dim() != 2 or self.allowed.shape != (self.vectors.shape[0],)):
            raise ValueError(f"a filter mask is (N,) over a shared corpus of N chunks, got {tuple(self.allowed.shape)} "
                             f"for vectors of shape {tuple(self.vectors.shape)}.")

    @cached_property
    def _allowed_count(self) -> int | None:
        return None if self.allowed is None else int(self.allowed.sum())

    @classmethod
    def shared(cls, vectors: torch.Tensor, texts: Sequence[str], questions: int,
               lexical: LexicalIndex | None = None, allowed: torch.Tensor | None = None,
               windows: Windows | None = None) -> Corpora:
        """One corpus (N, D) searched by `questions` questions (with its BM25 index, when it has one, the (N,)
        mask of the rows a filter allows, when one does, and its long chunks' later windows, when it has them)."""
        return cls(vectors, [texts] * questions, None, None if lexical is None else [lexical] * questions, allowed,
                   None if windows is None or not len(windows) else [windows] * questions)

    @classmethod
    def padded(cls, vectors: Sequence[torch.Tensor], texts: Sequence[Sequence[str]], device: torch.device,
               lexical: Sequence[LexicalIndex | None] | None = None,
               windows: Sequence[Windows | None] | None = None) -> Corpora:
        """One corpus per question: their (N_b, D) vectors zero-padded to (B, N, D), with the (B, N) mask (and
        each corpus's BM25 index and its long chunks' later windows, when given)."""
        sizes = [len(t) for t in texts]
        n, d = max(sizes, default=0), (vectors[0].shape[1] if vectors else 0)
        out = torch.zeros(len(sizes), n, d, device=device)  # (B, N, D)
        valid = torch.zeros(len(sizes), n, dtype=torch.bool, device=device)  # (B, N)
        for b, (v, size) in enumerate(zip(vectors, sizes, strict=True)):
            out[b, :size] = v.to(device)
            valid[b, :size] = True
        kept = None if windows is None or all(w is None or not len(w) for w in windows) else list(windows)
        return cls(out, texts, valid, None if lexical is None or all(x is None for x in lexical) else list(lexical),
                   windows=kept)

    def size(self, b: int) -> int:
        """How many chunks question `b` may take: its corpus's, or those its filter allows."""
        return len(self.texts[b]) if self._allowed_count is None else self._allowed_count

    @property
    def num_slots(self) -> int:
        """N: the longest corpus (the width of every score row)."""
        return self.vectors.shape[-2]


def state_pieces(texts: Sequence[str], positions: Sequence[int | None], order: StateOrder) -> list[str]:
    """The taken chunks' texts as the state shows them (§1): in taking order ('selection'), or in corpus order
    ('document'; chunks without a known position keep their taking order, after the placed ones).

    Args:
        texts: The taken chunks' texts, in the order they were taken.
        positions: Their places in the corpus (row numbers), None where a store does not record it.
    """
    if order == "selection":
        return list(texts)
    ranked = sorted(range(len(texts)), key=lambda j: (positions[j] is None, positions[j] or 0))
    return [texts[j] for j in ranked]


def encode_states(model: QNetwork, questions: Sequence[str], pieces: Sequence[Sequence[str]],
                  batch_size: int = 128) -> torch.Tensor:
    """(R, D) state vectors f_θ(q [SEP] c_1 [SEP] …) of rendered states, under the model's lock; serving threads
    share one model, and the states of callers that ask while a pass runs are encoded together in the next one
    (`state_batcher.StateBatcher`)."""
    return state_batcher(model).encode(questions, pieces, batch_size)  # (R, D)


def q_values(
    model: QNetwork, states: torch.Tensor, corpora: Corpora, rows: Sequence[int], taken: Sequence[Sequence[int]],
    *, heads: bool = False, names: Sequence[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Q-values of every chunk for each state, the taken chunks and padding at -inf (§2.2, §2.3).

    Args:
        states: (R, D) state vectors.
        corpora: The chunk vectors; state row r scores question `rows[r]`'s corpus.
        rows: (R,) the question of each state row.
        taken: (R,) per state row, the corpus rows it has taken (their positions shape the rotation).
        heads: Return the two heads' values (2, R, N) instead of their sum (R, N).
        names: Per state row, what to name in the error about non-finite values (its question).

    Returns:
        The masked Q-values and the (R, N) positions they were rotated by (None in position mode 'none').
        Rotary scores are computed in slices of rows that keep `ROTATE_BUDGET` floats of temporaries at once, or all
        rows in one pass where the compiled form serves (`positions.fused_scoring`: large corpora, no gradients).

    Raises:
        SearchError: the model produced NaN or infinite values for a real chunk.
    """
    n, device = corpora.num_slots, corpora.vectors.device  # scored where the vectors live
    states = states.to(device)
    selected = torch.zeros(len(rows), n, dtype=torch.bool, device=device)  # (R, N)
    for r, t in enumerate(taken):
        if t:
            selected[r, list(t)] = True
    valid = corpora.valid[list(rows)].to(device) if corpora.valid is not None else None  # (R, N) | None
    positions = model.positions(selected, valid, max((len(t) for t in taken), default=0) + 1)  # (R, N) | None
    vectors = corpora.vectors  # (N, D) | (B, N, D)
    mode = model.config.position_mode
    if mode == "absolute" and vectors.dim() == 2 and positions is not None:
        vectors, rotate = rotate_halves(vectors, positions[0]), None  # (N, D): absolute positions never change
    else:
        rotate = positions
    if rotate is None:
        scores = model.score(states, _corpus_rows(vectors, rows), None, heads=heads)
    else:
        fused = fused_scoring(n) and not (torch.is_grad_enabled() and states.requires_grad)
        step = len(rows) if fused else budget_rows(n, model.dim)
        parts = []
        for i in range(0, len(rows), step):
            part = _corpus_rows(vectors, rows[i : i + step])  # (N, D) | (S, N, D)
            parts.append(model.score(states[i : i + step], part, rotate[i : i + step], heads=heads))
        scores = torch.cat(parts, dim=-2) if len(parts) > 1 else parts[0]  # (R, N) | (2, R, N)
    if corpora.windows is not None:
        if heads or mode != "none":
            raise SearchError("long chunks' windows are scored by models without positions (position_mode 'none'), "
                              "one Q per chunk; build the corpus with long_chunks='cut' for this model.")
        scores = _best_windows(model, states, scores, corpora.windows, rows)
    if corpora.allowed is not None:  # a filter: the rows it refuses are never taken
        selected |= ~corpora.allowed.to(device)  # (R, N) | (N,) broadcast
    if valid is None:  # a shared corpus: every row is real (no mask to build)
        check_finite_q(scores.sum(dim=0) if heads else scores, names)
        return scores.masked_fill(selected, -math.inf), positions
    check_finite_q(scores.masked_fill(~valid, 0.0).reshape(-1, len(rows), n).sum(dim=0), names)
    return scores.masked_fill(selected | ~valid, -math.inf), positions


def _best_windows(model: QNetwork, states: torch.Tensor, scores: torch.Tensor, windows: Sequence[Windows | None],
                  rows: Sequence[int]) -> torch.Tensor:
    """(R, N) `scores` where a long chunk's Q is its best window's (`search.windows`): state rows are scored against
    their question's windows, one product per distinct set of windows (a shared corpus: one for every row)."""
    groups: dict[int, tuple[Windows, list[int]]] = {}
    for r, b in enumerate(rows):
        w = windows[b]
        if w is not None and len(w):
            groups.setdefault(id(w), (w, []))[1].append(r)
    for w, mine in groups.values():
        idx = torch.tensor(mine, device=scores.device)
        part = scores if len(mine) == len(rows) else scores[idx]  # (R', N)
        best = best_window_scores(part, model.score(states[idx], w.vectors.to(scores.device)), w.owner)  # (R', N)
        scores = best if len(mine) == len(rows) else scores.index_copy(0, idx, best)
    return scores


def _corpus_rows(vectors: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
    """The shared (N, D) corpus as it is, or the per-question corpora of `rows` (no copy when that is all of
    them in order)."""
    if vectors.dim() == 2 or list(rows) == list(range(vectors.shape[0])):
        return vectors
    return vectors[list(rows)]


@dataclass(frozen=True)
class Hopped:
    """One question's greedy hops: the corpus rows taken, each hop's Q-value and its ranking score (Q plus any
    lexical evidence, §4.5)."""

    taken: list[int]
    q_values: list[float]
    scores: list[float]


def greedy_hops(
    model: QNetwork, questions: Sequence[str], corpora: Corpora, horizons: Sequence[int], *,
    threshold: float | None = None, min_hops: int = 1, done: Callable[[int, list[int]], bool] | None = None,
    batch_size: int = 128, lexical_weight: float = 0.0, first: FirstRanking | None = None,
) -> list[Hopped]:
    """Greedy hops (§4): per question, the corpus rows taken hop by hop with their Q-values and scores.

    Every hop encodes the states of all live questions in one batch and takes each one's best untaken chunk by
    its ranking score (`hop_scores`: Q, plus `lexical_weight` × the lexical evidence). A question stops after
    `horizons[b]` hops, before a hop the stop rule refuses (`threshold` against that chunk's Q-value, live; None:
    no rule), or after a hop where `done(b, taken)` holds (evaluation ends an episode once its facts are in).
    `first` keeps the first hop's ranking of each question (its bare state's), for a question fill.
    """
    order = model.config.state_order
    out = [Hopped([], [], []) for _ in questions]
    live = [h > 0 for h in horizons]
    for t in range(max(horizons, default=0)):
        rows = [b for b in range(len(questions)) if live[b] and t < horizons[b]]
        if not rows:
            break
        q, rank = hop_scores(model, questions, corpora, rows, [out[b].taken for b in rows], order, batch_size,
                             lexical_weight)  # (R, N) each
        if first is not None and t == 0:
            first.keep(rows, q, rank)
        best, idx = rank.max(dim=1)  # (R,), (R,)
        q_best = q.gather(1, idx[:, None]).squeeze(1)  # (R,)
        for b, score, value, i in zip(rows, best.tolist(), q_best.tolist(), idx.tolist(), strict=True):
            if stops(threshold, min_hops, t, value):
                live[b] = False
                continue
            out[b].taken.append(int(i))
            out[b].q_values.append(float(value))
            out[b].scores.append(float(score))
            if done is not None and done(b, out[b].taken):
                live[b] = False
    return out


class FirstRanking:
    """The first hop's ranking of each question, kept for a question fill (§4.4): the `width` best (row, Q, score)
    triples of its bare state, which `question_ranking` would otherwise encode and score again. One search's: the
    hops and the fill read the same corpora."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.rows: dict[int, list[tuple[Any, float, float]]] = {}

    def keep(self, rows: Sequence[int], q: torch.Tensor, rank: torch.Tensor) -> None:
        """Keep the bare states' (R, N) Q-values and ranking scores of questions `rows`."""
        self.keep_items(rows, _best_items(q, rank, self.width))

    def keep_items(self, rows: Sequence[int], best: Sequence[list[tuple[Any, float, float]]]) -> None:
        """Keep each question's best (item, Q, score) triples of its bare state, best first (`width` of them, or
        every one its corpus holds)."""
        for b, items in zip(rows, best, strict=True):
            self.rows[b] = list(items[: self.width])

    def get(self, rows: Sequence[int], width: int) -> list[list[tuple[Any, float, float]]] | None:
        """The kept rankings of questions `rows`, when every one is kept and `width` is the width kept; else None."""
        if width != self.width or any(b not in self.rows for b in rows):
            return None
        return [self.rows[b] for b in rows]


@dataclass(frozen=True)
class Beam(Generic[Item]):
    """One hop sequence of beam search: what it took, each hop's Q-value and ranking score, and the scores' sum
    (what beams rank by)."""

    taken: tuple[Item, ...] = ()
    q_values: tuple[float, ...] = ()
    scores: tuple[float, ...] = ()

    @property
    def total(self) -> float:
        return sum(self.scores)

    def extend(self, item: Item, q: float, score: float) -> Beam[Item]:
        return Beam((*self.taken, item), (*self.q_values, q), (*self.scores, score))


Expand = Callable[[Sequence[int], Sequence[Sequence[Item]], int], list[list[tuple[Item, float, float]]]]
"""Steps 1–3 of a hop for R state rows: `expand(rows, taken, width)` renders, encodes and scores the state of
question `rows[r]` after taking `taken[r]`, and returns per row its `width` best untaken items as (item, Q-value,
ranking score), best score first (fewer where the corpus runs out)."""


def beam_hops(
    expand: Expand[Item], questions: int, horizons: Sequence[int], beam_size: int, *,
    threshold: float | None = None, min_hops: int = 1, distinct: Callable[[Item], Hashable] | None = None,
) -> list[Beam[Item]]:
    """Beam search (§4): per question, the best of the `beam_size` hop sequences with the largest total Q.

    Every hop expands the states of all live beams of all questions in one `expand` call; each question keeps its
    `beam_size` best extensions (ties keep the ranking `expand` gave). A question stops after `horizons[b]` hops
    or when its corpus runs out. With `beam_size=1` the stop rule is applied live (`threshold`; None: no rule):
    that is greedy search, with no encoder call past the stop; wider beams run the whole horizon and leave the
    stop rule to the caller (`stop_point` along the best beam). `distinct(item)` names an item for states in
    document order, where the same set of items is the same state whatever the order it was taken in: then
    only the best sequence of each set is kept, so the beam holds distinct states.
    """
    beams: list[list[Beam[Item]]] = [[Beam()] for _ in range(questions)]
    live = [h > 0 for h in horizons]
    for t in range(max(horizons, default=0)):
        rows = [(b, beam) for b in range(questions) if live[b] and t < horizons[b] for beam in beams[b]]
        if not rows:
            break
        candidates = expand([b for b, _ in rows], [beam.taken for _, beam in rows], beam_size)
        grown: dict[int, list[Beam[Item]]] = {b: [] for b, _ in rows}
        for (b, beam), row in zip(rows, candidates, strict=True):
            grown[b].extend(beam.extend(item, q, score) for item, q, score in row)
        for b, new in grown.items():
            if not new or (beam_size == 1 and stops(threshold, min_hops, t, new[0].q_values[-1])):
                live[b] = False  # the corpus ran out, or greedy search stops before this hop
                continue
            beams[b] = _prune(new, beam_size, distinct)
    return [max(kept, key=lambda x: x.total) for kept in beams]


def _prune(beams: list[Beam[Item]], width: int, distinct: Callable[[Item], Hashable] | None) -> list[Beam[Item]]:
    beams = sorted(beams, key=lambda x: -x.total)  # stable: ties keep the ranking of `expand`
    if distinct is None:
        return beams[:width]
    seen: set[frozenset[Hashable]] = set()
    kept: list[Beam[Item]] = []
    for beam in beams:
        key = frozenset(distinct(item) for item in beam.taken)
        if key not in seen:
            seen.add(key)
            kept.append(beam)
        if len(kept) == width:
            break
    return kept


def fill_up(expand: Expand[Item], taken: Sequence[Sequence[Item]], k: int,
            sizes: Sequence[int | None]) -> list[list[tuple[Item, float, float]]]:
    """Per question, the (item, Q, score) triples that fill its hops up to `k` results (at most its corpus,
    `sizes[b]`; None: unknown): the best untaken items for the state after its last hop, best first (one more
    state encoding, no more hops)."""
    wanted = [k if size is None else min(k, size) for size in sizes]
    need = [b for b in range(len(taken)) if len(taken[b]) < wanted[b]]
    out: list[list[tuple[Item, float, float]]] = [[] for _ in taken]
    if not need:
        return out
    width = max(wanted[b] - len(taken[b]) for b in need)
    for b, row in zip(need, expand(need, [taken[b] for b in need], width), strict=True):
        out[b] = row[: wanted[b] - len(taken[b])]
    return out


def question_ranking(expand: Expand[Item], questions: int, width: int) -> list[list[tuple[Item, float, float]]]:
    """Per question, the `width` best (item, Q, score) triples of its bare state (no chunk taken), as `expand` ranks
    them (§4.4): the first hop's ranking, the Q-value plus any lexical evidence of the question, so the scores are
    on the hops' scale. One state encoding per question."""
    if questions == 0 or width < 1:
        return [[] for _ in range(questions)]
    return expand(list(range(questions)), [() for _ in range(questions)], width)


def question_cut(ranking: Sequence[tuple[Item, float, float]], taken: Sequence[Item], scores: Sequence[float],
                 min_hops: int = 1, key: Callable[[Item], Hashable] | None = None) -> int:
    """How many of one question's hops the guard keeps against its own ranking (§4.4): the hops end before the
    first hop t >= max(1, `min_hops`) whose score is below the best score `ranking` (the question's, best first)
    gives an item not taken before t: there the question's own next passage is worth more than the hop's."""
    name: Callable[[Item], Hashable] = key if key is not None else (lambda item: item)  # type: ignore[assignment,return-value]
    names = [name(item) for item in taken]
    for t in range(max(1, min_hops), len(taken)):
        before = set(names[:t])
        rival = next((score for item, _, score in ranking if name(item) not in before), None)
        if rival is not None and scores[t] < rival:
            return t
    return len(taken)


def question_fill(ranking: Sequence[Sequence[tuple[Item, float, float]]], taken: Sequence[Sequence[Item]], k: int,
                  sizes: Sequence[int | None], key: Callable[[Item], Hashable] | None = None
                  ) -> list[list[tuple[Item, float, float]]]:
    """Per question, the (item, Q, score) triples that fill its hops up to `k` results from its own ranking
    (`question_ranking`, at least `k` wide), best first, the items taken left out (`key(item)` names an item;
    None: the item itself); at most `sizes[b]` results in all (None: unknown)."""
    name: Callable[[Item], Hashable] = key if key is not None else (lambda item: item)  # type: ignore[assignment,return-value]
    out: list[list[tuple[Item, float, float]]] = []
    for row, took, size in zip(ranking, taken, sizes, strict=True):
        wanted = k if size is None else min(k, size)
        seen = {name(item) for item in took}
        # The k best hold at most len(took) taken items, so they hold the k - len(took) results wanted.
        out.append([t for t in row if name(t[0]) not in seen][: max(0, wanted - len(took))])
    return out


def top_up(
    model: QNetwork, questions: Sequence[str], corpora: Corpora, taken: Sequence[list[int]], k: int,
    batch_size: int = 128, lexical_weight: float = 0.0,
) -> list[list[tuple[int, float, float]]]:
    """`fill_up` over the hop engine's corpora: per question, the (row, Q, score) triples after its last hop up to
    `k`."""
    expand = corpus_expand(model, questions, corpora, batch_size, lexical_weight)
    return fill_up(expand, taken, k, [corpora.size(b) for b in range(len(questions))])


def corpus_expand(model: QNetwork, questions: Sequence[str], corpora: Corpora, batch_size: int = 128,
                  lexical_weight: float = 0.0, first: FirstRanking | None = None) -> Expand[int]:
    """The `Expand` of the hop engine's corpora: items are corpus rows, ranked by `hop_scores`. With `first`, the
    bare states' rankings are kept there and read back from it (`question_ranking` after the first hop)."""
    order = model.config.state_order

    def expand(rows: Sequence[int], taken: Sequence[Sequence[int]], width: int) -> list[list[tuple[int, float, float]]]:
        bare = first is not None and not any(taken)
        if bare and first is not None and (kept := first.get(rows, width)) is not None:
            return kept
        q, rank = hop_scores(model, questions, corpora, rows, taken, order, batch_size, lexical_weight)  # (R, N)
        if bare and first is not None:
            first.keep(rows, q, rank)
        return _best_items(q, rank, width)

    return expand


def _best_items(q: torch.Tensor, rank: torch.Tensor, width: int) -> list[list[tuple[int, float, float]]]:
    """Per row of (R, N) masked Q-values and ranking scores, its `width` best (row, Q, score) triples by score,
    best first, masked ones (-inf) left out."""
    top, idx = rank.topk(min(width, rank.shape[1]), dim=1)  # (R, K)
    values = q.gather(1, idx)  # (R, K)
    return [[(int(i), float(v), float(s)) for s, v, i in zip(s_row, v_row, i_row, strict=True) if s != -math.inf]
            for s_row, v_row, i_row in zip(top.tolist(), values.tolist(), idx.tolist(), strict=True)]


def _scored(pairs: list[list[tuple[Chunk, float]]]) -> list[list[tuple[Chunk, float, float]]]:
    """A store's (chunk, inner product) pairs as (chunk, Q, score): a store ranks by Q alone."""
    return [[(c, q, q) for c, q in row] for row in pairs]


def store_expand(model: QNetwork, questions: Sequence[str], store: ChunkStore, batch_size: int = 128,
                 where: Filter | None = None, lexical_weight: float = 0.0,
                 first: FirstRanking | None = None) -> Expand[Chunk]:
    """The `Expand` of an external store (position mode 'none'): items are its chunks, ranked by the store's inner
    products with the state vectors, the taken ones excluded by id (and those `where` refuses, by the store); with
    `lexical_weight` > 0, by Q plus the lexical evidence of the state's text, which the store's `lexical_search`
    adds (a store the searcher gave a lexical index: `with_lexical`). With `first`, the first hop asks the store
    for `first.width` chunks at least and keeps them, and a question fill reads them back (the bare question is not
    encoded, nor the store asked, again)."""
    order = model.config.state_order

    def expand(rows: Sequence[int], taken: Sequence[Sequence[Chunk]], width: int) -> list[list[tuple[Chunk, float, float]]]:
        bare = first is not None and not any(taken)
        if bare and first is not None and (kept := first.get(rows, width)) is not None:
            return kept
        asked = max(width, first.width) if bare and first is not None else width
        pieces = [state_pieces([c.text for c in s], [c.position for c in s], order) for s in taken]
        names = [questions[b] for b in rows]
        states = encode_states(model, names, pieces, batch_size)  # (R, D)
        check_finite_q(states, names)
        if lexical_weight > 0:
            texts = [state_text(questions[b], [c.text for c in s]) for b, s in zip(rows, taken, strict=True)]
            got: list[list[tuple[Chunk, float, float]]] = store.lexical_search(  # type: ignore[attr-defined]
                states, asked, [{c.id for c in s} for s in taken], where, texts=texts, questions=names,
                weight=lexical_weight, pair_weight=model.hop_settings.pair_weight)
        else:
            got = _scored(_store_search(store, states, asked, taken, where))
        if bare and first is not None:
            first.keep_items(rows, got)
        return [row[:width] for row in got]

    return expand


def _store_search(store: ChunkStore, states: torch.Tensor, width: int, taken: Sequence[Sequence[Chunk]],
                  where: Filter | None) -> list[list[tuple[Chunk, float]]]:
    """The store's `width` best chunks per state, the taken ones excluded; a filter only when there is one (a
    store written before filters takes no `where`)."""
    exclude = [{c.id for c in s} for s in taken]
    if where is None:
        return store.search(states, width, exclude=exclude)
    return store.search(states, width, exclude=exclude, where=where)


def hop_scores(model: QNetwork, questions: Sequence[str], corpora: Corpora, rows: Sequence[int],
               taken: Sequence[Sequence[int]], order: StateOrder, batch_size: int = 128,
               lexical_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Render, encode and score the states of question `rows[r]` after taking the rows `taken[r]` (steps 1–3).

    Returns:
        (R, N) masked Q-values and (R, N) ranking scores: the Q-values plus `lexical_weight` × the lexical evidence
        of each state's text (§4.5; the same tensor when the weight is 0).

    Raises:
        SearchError: a lexical weight above 0 over a corpus without a lexical index.
    """
    pieces = [state_pieces([corpora.texts[b][i] for i in t], t, order) for b, t in zip(rows, taken, strict=True)]
    names = [questions[b] for b in rows]
    states = encode_states(model, names, pieces, batch_size)  # (R, D)
    q, _ = q_values(model, states, corpora, rows, taken, names=names)  # (R, N)
    if lexical_weight == 0:
        return q, q
    texts = [state_text(questions[b], [corpora.texts[b][i] for i in t]) for b, t in zip(rows, taken, strict=True)]
    evidence = _lexical_evidence(corpora, rows, texts, names, torch.isfinite(q), model.hop_settings.pair_weight)
    return q, q + lexical_weight * evidence.to(q.device)


def _lexical_evidence(corpora: Corpora, rows: Sequence[int], texts: Sequence[str], questions: Sequence[str],
                      available: torch.Tensor, pair_weight: float = 0.0) -> torch.Tensor:
    """(R, N) lexical evidence of each state's text over question `rows[r]`'s corpus (0 on padding): its words'
    BM25 scaled to [0, 1], plus `pair_weight` × the word pairs' BM25 of the question `questions[r]` alone (not of
    the passages taken: their phrases would pull in their own neighbours), scaled the same way (§4.5)."""
    indexes = corpora.lexical
    if indexes is None or any(indexes[b] is None for b in rows):
        raise SearchError("this search weighs lexical evidence (lexical_weight > 0) but the corpus has no lexical "
                          "index: build the index with lexical=True (the retrievers do when the model needs it), or "
                          "search with lexical_weight=0.")
    held = {id(indexes[b]): indexes[b] for b in rows}.values()  # one BM25 pass per distinct corpus
    if pair_weight > 0 and any(index is not None and index.pairs is None for index in held):
        raise SearchError("this model weighs word pairs in its lexical evidence (hop_settings.pair_weight > 0) but "
                          "the corpus's lexical index holds none: build it with pairs (ChunkIndex.with_lexical("
                          "pairs=True); the searchers and retrievers do), or set the model's pair_weight to 0.")
    words = torch.zeros(available.shape, dtype=torch.float32)  # (R, N)
    pairs = torch.zeros(available.shape, dtype=torch.float32) if pair_weight > 0 else None  # (R, N)
    for index in held:
        mine = [r for r, b in enumerate(rows) if indexes[b] is index]
        assert index is not None
        words[mine, : len(index)] = index.scores([texts[r] for r in mine])  # (R', N_b)
        if pairs is not None:
            pairs[mine, : len(index)] = index.pair_scores([questions[r] for r in mine])
    evidence = lexical_evidence(words, available.cpu())  # (R, N)
    return evidence if pairs is None else evidence + pair_weight * lexical_evidence(pairs, available.cpu())


def stops(threshold: float | None, min_hops: int, hop: int, best_q: float) -> bool:
    """Whether adaptive greedy search stops before hop `hop` (0-based) whose best Q-value is `best_q`."""
    return threshold is not None and hop >= min_hops and best_q < threshold


def stop_point(q_values: Sequence[float], threshold: float | None, min_hops: int) -> int:
    """How many hops the stop rule keeps: stop before the first hop ≥ min_hops whose Q is below threshold."""
    for t, q in enumerate(q_values):
        if stops(threshold, min_hops, t, q):
            return t
    return len(q_values)


def check_finite_q(values: torch.Tensor, questions: Sequence[str] | None) -> None:
    """Raise `SearchError` if state vectors or Q-values hold NaN/inf (the stop rule would never fire)."""
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        row = int(bad.reshape(bad.shape[0], -1).any(dim=1).nonzero()[0, 0])
        which = f" for question {questions[row]!r:.80}" if questions else ""
        raise SearchError(f"the model produced NaN or infinite Q-values{which}: its weights or the index vectors are "
                          "damaged or training diverged; load an earlier checkpoint or rebuild the index.")
