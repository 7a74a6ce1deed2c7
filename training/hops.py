"""The hop engine (METHOD.md §1, §2, §4): the one place where states become hops, for training, evaluation and
serving.

Shape legend: B questions, R state rows (some of the questions, or questions × beams), N chunks (the longest
corpus when each question has its own), D vector dim, K width.

One hop, for every live state at once:

1. render the state: the question, then the taken chunks' texts in the model's state order (§1);
2. encode it with the state tower f_θ (`encode_states`);
3. place every chunk relative to what was taken (§2.3) and rotate the cached, unrotated chunk vectors g_φ(c)
   by those positions; score Q = ⟨f_θ(s), R(pos)·g_φ(c)⟩; mask the taken chunks and padding (`q_values`);
4. act: the trainer samples from these scores (`policy.observe`), evaluation and serving take the argmax
   (`greedy_hops`) and stop where the stop rule says (`stop_point`, §4).

Training, validation, `search_many`, `MultiHopSearcher` and the eval baselines all call these functions, so
the hops a model is served with are the hops it was trained and selected with.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from qrag.training.config import HopSettings, StateOrder
from qrag.training.positions import rotate_halves
from qrag.training.qnet import QNetwork, model_lock

Order = Literal["hop", "document"]
FromModel = Literal["model"]
FROM_MODEL: FromModel = "model"  # a hop setting that takes the model's saved value (`QNetwork.hops`)
ROTATE_BUDGET = 1 << 25  # elements of (rows, N, D) rotary-scoring temporaries built at once (128 MiB fp32)


class SearchError(ValueError):
    """A search argument or a model/store pairing is invalid; the message names the value and the fix."""


@dataclass
class SearchConfig:
    """Multi-hop search settings; every field can be overridden per call (see `qrag.training.search`)."""

    k: int | None = None
    """Exact number of results per question; None: adaptive (stop rule decides)."""
    max_hops: int | None = None
    """Most hops (state encodings that pick a chunk) per question; None: the model's trained horizon."""
    stop_threshold: float | FromModel | None = FROM_MODEL
    """Stop before a hop whose best Q-value is below this; 'model': the model's saved (calibrated) threshold;
    None disables the rule."""
    min_hops: int = 1
    """Hops always taken before the stop rule may stop (a retriever that returns nothing helps nobody)."""
    beam_size: int = 1
    """Hop sequences kept per question; 1 is greedy."""
    order: Order = "hop"
    """Order of the returned hits: 'hop' or 'document' (position in the corpus, for long documents)."""
    batch_size: int = 64
    """Questions searched together (their states share encoder batches)."""

    def validate(self) -> SearchConfig:
        for name in ("k", "max_hops", "min_hops", "beam_size", "batch_size"):
            value = getattr(self, name)
            if name in ("k", "max_hops") and value is None:
                continue
            low = 0 if name == "min_hops" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SearchError(f"{name} must be an integer >= {low}, got {value!r}.")
        t = self.stop_threshold
        if t is not None and t != FROM_MODEL and (isinstance(t, bool) or not isinstance(t, (int, float)) or math.isnan(t)):
            raise SearchError(f"stop_threshold must be a number, 'model' or None, got {t!r}.")
        if self.order not in ("hop", "document"):
            raise SearchError(f"order must be 'hop' or 'document', got {self.order!r}.")
        return self

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def resolved(self, hops: HopSettings) -> SearchConfig:
        """A copy whose `max_hops` and `stop_threshold` left to the model take the model's saved values."""
        return dataclasses.replace(
            self,
            max_hops=hops.max_hops if self.max_hops is None else self.max_hops,
            stop_threshold=hops.stop_threshold if self.stop_threshold == FROM_MODEL else self.stop_threshold,
        )

    @property
    def horizon(self) -> int:
        """`max_hops` of a resolved config."""
        if self.max_hops is None:
            raise SearchError("max_hops is left to the model: resolve the config with SearchConfig.resolved first.")
        return self.max_hops

    @property
    def threshold(self) -> float | None:
        """`stop_threshold` of a resolved config (None: no stop rule)."""
        if self.stop_threshold == FROM_MODEL:
            raise SearchError("stop_threshold is left to the model: resolve the config with SearchConfig.resolved first.")
        return self.stop_threshold  # type: ignore[return-value]

    def with_overrides(self, overrides: Mapping[str, Any]) -> SearchConfig:
        """A copy with per-call overrides; unknown names raise `SearchError` listing the known ones."""
        unknown = sorted(set(overrides) - set(self.field_names()))
        if unknown:
            raise SearchError(f"unknown search argument(s) {unknown}; allowed: {self.field_names()}.")
        return dataclasses.replace(self, **overrides).validate()


@dataclass(frozen=True)
class Corpora:
    """What hops are scored against: one corpus every question searches, or one corpus per question.

    Attributes:
        vectors: (N, D) unrotated chunk vectors of a shared corpus, or (B, N, D) one corpus per question,
            zero-padded to the longest.
        texts: Per question, its corpus's chunk texts (the states render them).
        valid: (B, N) real rows of per-question corpora; None for a shared corpus (every row is real).
    """

    vectors: torch.Tensor
    texts: Sequence[Sequence[str]]
    valid: torch.Tensor | None = None

    @classmethod
    def shared(cls, vectors: torch.Tensor, texts: Sequence[str], questions: int) -> Corpora:
        """One corpus (N, D) searched by `questions` questions."""
        return cls(vectors, [texts] * questions)

    @classmethod
    def padded(cls, vectors: Sequence[torch.Tensor], texts: Sequence[Sequence[str]], device: torch.device) -> Corpora:
        """One corpus per question: their (N_b, D) vectors zero-padded to (B, N, D), with the (B, N) mask."""
        sizes = [len(t) for t in texts]
        n, d = max(sizes, default=0), (vectors[0].shape[1] if vectors else 0)
        out = torch.zeros(len(sizes), n, d, device=device)  # (B, N, D)
        valid = torch.zeros(len(sizes), n, dtype=torch.bool, device=device)  # (B, N)
        for b, (v, size) in enumerate(zip(vectors, sizes, strict=True)):
            out[b, :size] = v.to(device)
            valid[b, :size] = True
        return cls(out, texts, valid)

    def size(self, b: int) -> int:
        """How many chunks question `b`'s corpus holds."""
        return len(self.texts[b])

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
    """(R, D) state vectors f_θ(q [SEP] c_1 [SEP] …) of rendered states, under the model's lock (serving
    threads share one model)."""
    with model_lock(model):
        return model.embed_states(questions, pieces, batch_size=batch_size)  # (R, D)


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
        Rotary scores are computed in slices of rows that keep `ROTATE_BUDGET` floats of temporaries at once.

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
    positions = model.positions(selected, valid)  # (R, N) | None
    vectors = corpora.vectors  # (N, D) | (B, N, D)
    mode = model.config.position_mode
    if mode == "absolute" and vectors.dim() == 2 and positions is not None:
        vectors, rotate = rotate_halves(vectors, positions[0]), None  # (N, D): absolute positions never change
    else:
        rotate = positions
    if rotate is None:
        scores = model.score(states, _corpus_rows(vectors, rows), None, heads=heads)
    else:
        step = max(1, ROTATE_BUDGET // max(1, n * model.dim))
        parts = []
        for i in range(0, len(rows), step):
            part = _corpus_rows(vectors, rows[i : i + step])  # (N, D) | (S, N, D)
            parts.append(model.score(states[i : i + step], part, rotate[i : i + step], heads=heads))
        scores = torch.cat(parts, dim=-2)  # (R, N) | (2, R, N)
    real = valid if valid is not None else torch.ones_like(selected)  # (R, N)
    check_finite_q(scores.masked_fill(~real, 0.0).reshape(-1, len(rows), n).sum(dim=0), names)
    return scores.masked_fill(selected | ~real, -math.inf), positions


def _corpus_rows(vectors: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
    """The shared (N, D) corpus as it is, or the per-question corpora of `rows` (no copy when that is all of
    them in order)."""
    if vectors.dim() == 2 or list(rows) == list(range(vectors.shape[0])):
        return vectors
    return vectors[list(rows)]


def greedy_hops(
    model: QNetwork, questions: Sequence[str], corpora: Corpora, horizons: Sequence[int], *,
    threshold: float | None = None, min_hops: int = 1, done: Callable[[int, list[int]], bool] | None = None,
    batch_size: int = 128,
) -> list[tuple[list[int], list[float]]]:
    """Greedy hops (§4): per question, the corpus rows taken hop by hop and their Q-values.

    Every hop encodes the states of all live questions in one batch and takes each one's best untaken chunk.
    A question stops after `horizons[b]` hops, before a hop the stop rule refuses (`threshold`, live; None: no
    rule), or after a hop where `done(b, taken)` holds (evaluation ends an episode once its facts are in).
    """
    order = model.config.state_order
    taken: list[list[int]] = [[] for _ in questions]
    qs: list[list[float]] = [[] for _ in questions]
    live = [h > 0 for h in horizons]
    for t in range(max(horizons, default=0)):
        rows = [b for b in range(len(questions)) if live[b] and t < horizons[b]]
        if not rows:
            break
        scores, _ = _hop_scores(model, questions, corpora, rows, taken, order, batch_size)  # (R, N)
        best, idx = scores.max(dim=1)  # (R,), (R,)
        for b, q, i in zip(rows, best.tolist(), idx.tolist(), strict=True):
            if stops(threshold, min_hops, t, q):
                live[b] = False
                continue
            taken[b].append(int(i))
            qs[b].append(float(q))
            if done is not None and done(b, taken[b]):
                live[b] = False
    return list(zip(taken, qs, strict=True))


def top_up(
    model: QNetwork, questions: Sequence[str], corpora: Corpora, taken: Sequence[list[int]], k: int,
    batch_size: int = 128,
) -> list[list[tuple[int, float]]]:
    """Per question, the (row, Q) pairs that fill its hops up to `k` results (at most its corpus): the best
    untaken chunks for the state after its last hop, best first (one more state encoding, no more hops)."""
    need = [b for b in range(len(questions)) if len(taken[b]) < min(k, corpora.size(b))]
    out: list[list[tuple[int, float]]] = [[] for _ in questions]
    if not need:
        return out
    scores, _ = _hop_scores(model, questions, corpora, need, taken, model.config.state_order, batch_size)  # (R, N)
    width = max(min(k, corpora.size(b)) - len(taken[b]) for b in need)
    top, idx = scores.topk(min(width, scores.shape[1]), dim=1)  # (R, K)
    for r, b in enumerate(need):
        missing = min(k, corpora.size(b)) - len(taken[b])
        out[b] = [(int(i), float(q)) for q, i in zip(top[r, :missing].tolist(), idx[r, :missing].tolist(), strict=True)]
    return out


def _hop_scores(model: QNetwork, questions: Sequence[str], corpora: Corpora, rows: list[int],
                taken: Sequence[list[int]], order: StateOrder, batch_size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Render, encode and score the states of questions `rows` (steps 1–3 of a hop)."""
    pieces = [state_pieces([corpora.texts[b][i] for i in taken[b]], taken[b], order) for b in rows]
    names = [questions[b] for b in rows]
    states = encode_states(model, names, pieces, batch_size)  # (R, D)
    return q_values(model, states, corpora, rows, [taken[b] for b in rows], names=names)


def stops(threshold: float | None, min_hops: int, hop: int, best_q: float) -> bool:
    """Whether adaptive greedy search stops before hop `hop` (0-based) whose best Q-value is `best_q`."""
    return threshold is not None and hop >= min_hops and best_q < threshold


def stop_point(qs: Sequence[float], threshold: float | None, min_hops: int) -> int:
    """How many hops the stop rule keeps: stop before the first hop ≥ min_hops whose Q is below threshold."""
    for t, q in enumerate(qs):
        if stops(threshold, min_hops, t, q):
            return t
    return len(qs)


def check_finite_q(values: torch.Tensor, questions: Sequence[str] | None) -> None:
    """Raise `SearchError` if state vectors or Q-values hold NaN/inf (the stop rule would never fire)."""
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        row = int(bad.reshape(bad.shape[0], -1).any(dim=1).nonzero()[0, 0])
        which = f" for question {questions[row]!r:.80}" if questions else ""
        raise SearchError(f"the model produced NaN or infinite Q-values{which}: its weights or the index vectors are "
                          "damaged or training diverged; load an earlier checkpoint or rebuild the index.")
