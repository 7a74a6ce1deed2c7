"""Calibrating the stop rule (METHOD.md §4) on a model's own validation episodes.

The paper stops before a hop whose best Q-value is below 0.5. That number suits Q-values that reach about
1.0 at the first hop; a model trained on other text, with another reward scale or fewer transitions, has
Q-values of its own, and a fixed 0.5 can cut a three-fact chain one hop short or never stop at all. So the
threshold is chosen where the model will be used from: greedy hops up to `max_hops` on validation episodes,
recording each hop's best Q-value; then, among every threshold that changes where some episode stops, the
one with the best mean fact F1 whose fact EM stays within `em_tolerance` of EM with all `max_hops` hops
(the rule must not cost coverage: METHOD.md §4.3, "The stop rule").

Shape legend: E episodes, H hops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from qrag.training.data import Episode
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorCache
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import SearchConfig, search_many, stop_point

EM_TOLERANCE = 0.01


@dataclass(frozen=True)
class Calibration:
    """The chosen threshold and what it scores on the calibration episodes, beside the no-stop baseline."""

    threshold: float
    fact_em: float
    fact_f1: float
    mean_hops: float
    em_all_hops: float
    f1_all_hops: float
    episodes: int
    max_hops: int


def _scores(taken: Sequence[int], gold: frozenset[int]) -> tuple[float, float]:
    """(fact EM, fact F1) of the chunks `taken` against the gold set (METHOD.md §5)."""
    hit = len(gold.intersection(taken))
    em = float(hit == len(gold))
    f1 = 0.0 if hit == 0 else 2 * hit / (len(set(taken)) + len(gold))
    return em, f1


def choose_threshold(
    hop_qs: Sequence[Sequence[float]],
    hop_rows: Sequence[Sequence[int]],
    gold: Sequence[Sequence[int]],
    *,
    min_hops: int = 1,
    em_tolerance: float = EM_TOLERANCE,
) -> tuple[float, dict[str, float]]:
    """The stop threshold with the best mean fact F1 among those whose fact EM is within `em_tolerance` of
    EM without stopping; ties go to the lower threshold (more hops, more coverage).

    Args:
        hop_qs: Per episode, the best Q-value of each greedy hop, in hop order (E lists of ≤ H floats).
        hop_rows: Per episode, the chunk each hop took.
        gold: Per episode, the supporting chunk rows (non-empty).
        min_hops: Hops always taken before the rule may stop (as `SearchConfig.min_hops`).
        em_tolerance: How much fact EM the rule may give up against taking every hop.

    Returns:
        The threshold (the midpoint between the Q-values it separates, so a small drift in Q does not move
        the cut) and its mean `fact_em`, `fact_f1` and `mean_hops`, beside `em_all_hops`/`f1_all_hops`.

    Raises:
        ValueError: no episodes, mismatched lengths, or an episode without gold rows.
    """
    if not hop_qs or not (len(hop_qs) == len(hop_rows) == len(gold)):
        raise ValueError(f"need the same non-zero number of episodes in hop_qs, hop_rows and gold, got "
                         f"{len(hop_qs)}, {len(hop_rows)}, {len(gold)}.")
    golds = [frozenset(g) for g in gold]
    if any(not g for g in golds):
        raise ValueError("every calibration episode needs at least one supporting chunk.")
    values = sorted({q for q_values in hop_qs for t, q in enumerate(q_values) if t >= min_hops and math.isfinite(q)})
    # One threshold per distinct behaviour: below every Q (never stops), between neighbours, above every Q.
    cuts = [values[0] - 1.0] if values else [0.0]
    cuts += [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)]
    cuts += [values[-1] + 1.0] if values else []

    def evaluate(threshold: float | None) -> dict[str, float]:
        ems, f1s, kept_hops = [], [], []
        for q_values, rows, g in zip(hop_qs, hop_rows, golds, strict=True):
            kept = stop_point(q_values, threshold, min_hops)
            em, f1 = _scores(rows[:kept], g)
            ems.append(em)
            f1s.append(f1)
            kept_hops.append(kept)
        n = len(ems)
        return {"fact_em": sum(ems) / n, "fact_f1": sum(f1s) / n, "mean_hops": sum(kept_hops) / n}

    everything = evaluate(None)
    best_cut, best = cuts[0], evaluate(cuts[0])
    for cut in cuts[1:]:
        scored = evaluate(cut)
        if scored["fact_em"] >= everything["fact_em"] - em_tolerance and scored["fact_f1"] > best["fact_f1"]:
            best_cut, best = cut, scored
    return best_cut, {**best, "em_all_hops": everything["fact_em"], "f1_all_hops": everything["fact_f1"]}


@torch.no_grad()
def calibrate_stop_threshold(
    model: QNetwork,
    episodes: Sequence[Episode],
    *,
    max_hops: int | None = None,
    min_hops: int = 1,
    em_tolerance: float = EM_TOLERANCE,
    store: ChunkVectorCache | None = None,
    batch_size: int = 32,
) -> Calibration:
    """Greedy hops on `episodes` with `model`, then `choose_threshold`. Does not change the model: store the
    result with `model.hop_settings = dataclasses.replace(model.hop_settings, stop_threshold=c.threshold, calibrated=True)`.

    Args:
        model: The trained network.
        episodes: Validation episodes (never the test split), each with supporting chunks.
        max_hops: The horizon (default: the model's `hops.max_hops`).
        min_hops: As `SearchConfig.min_hops`.
        em_tolerance: See `choose_threshold`.
        store: Chunk vectors already computed for a frozen chunk tower (`ChunkVectorCache`), reused.
        batch_size: Questions searched together.

    Raises:
        ValueError: no episodes, or an episode without supporting chunks.
    """
    if not episodes:
        raise ValueError("calibrating the stop rule needs at least one validation episode.")
    horizon = model.hop_settings.max_hops if max_hops is None else max_hops
    model.eval()
    indexes = [ChunkIndex(store.vectors(model, ep.chunks) if store is not None else model.embed_chunks(ep.chunks),
                          ep.chunks, encoder=model.config.encoder) for ep in episodes]
    cfg = SearchConfig(k=horizon, max_hops=horizon, stop_threshold=None, min_hops=min_hops, batch_size=batch_size)
    results = search_many(model, [ep.question for ep in episodes], indexes, cfg)
    hop_hits = [sorted(r.hits, key=lambda h: h.hop)[:horizon] for r in results]
    threshold, scores = choose_threshold(
        [[h.q_value for h in hits] for hits in hop_hits], [[int(h.chunk.id) for h in hits] for hits in hop_hits],
        [list(ep.supporting) for ep in episodes], min_hops=min_hops, em_tolerance=em_tolerance,
    )
    return Calibration(threshold=threshold, episodes=len(episodes), max_hops=horizon, **scores)
