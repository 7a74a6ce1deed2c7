"""Acting's scores: the Q-values actions are sampled from and the soft value the TD target bootstraps from.

`score_step` scores every available chunk of every active episode through the hop engine
(`qrag.training.search.hops`), and with the target towers the soft value of each state; `ChunkCache` keeps the
per-slot chunk vectors they score.

Shape legend: E environments, N chunks (the longest episode among them), D dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from qrag.training.data.episode import Episode
from qrag.training.learn import td
from qrag.training.learn.batching import length_groups, take_rows
from qrag.training.learn.env import EpisodeState, RetrievalEnv
from qrag.training.model.qnet import QNetwork
from qrag.training.model.towers import eval_mode, model_lock
from qrag.training.model.trunk import StateParts
from qrag.training.search import hops
from qrag.training.search.chunk_vectors import ChunkVectorCache

ACTING_GROUPS = 4
"""Batches of similar length a step's states are encoded in when the trunk is split off (`state_parts`)."""


class ChunkCache:
    """Unrotated chunk vectors of the episode in each environment slot, for one network.

    Vectors depend only on chunk text, so they are computed once per episode (and refreshed when the
    network has changed, at each rollout start). With a frozen chunk tower they never change: `store`
    then keeps every text's vector for the whole run (shared by the online and target networks).
    """

    def __init__(self, qnet: QNetwork, batch_size: int, store: ChunkVectorCache | None = None) -> None:
        self.qnet, self.batch_size, self.store = qnet, batch_size, store
        self._owner: dict[int, EpisodeState] = {}
        self._vectors: dict[int, torch.Tensor] = {}

    def clear(self) -> None:
        self._owner.clear()
        self._vectors.clear()

    def corpora(self, env: RetrievalEnv, slots: Sequence[int]) -> hops.Corpora:
        """The slots' episodes as the hop engine's per-question corpora (vectors zero-padded to the longest)."""
        for e in slots:
            s = env.slot(e)
            if self._owner.get(e) is not s:
                self._owner[e] = s
                self._vectors[e] = episode_vectors(self.qnet, s.episode, self.batch_size, self.store)
        return hops.Corpora.padded([self._vectors[e] for e in slots], [env.slot(e).episode.chunks for e in slots],
                                   self.qnet.device)

    def slot_vectors(self, e: int) -> torch.Tensor:
        """(N, D) vectors of the episode in slot `e`, as the last `corpora` call computed them."""
        return self._vectors[e]


def episode_vectors(qnet: QNetwork, episode: Episode, batch_size: int, store: ChunkVectorCache | None) -> torch.Tensor:
    """(N, D) unrotated chunk vectors of an episode, from the run's cache when the chunk tower is frozen."""
    chunks = episode.chunks
    return store.vectors(qnet, chunks, batch_size=batch_size) if store is not None else qnet.embed_chunks(chunks, batch_size)


@dataclass
class StepScores:
    """Everything acting computes for the active slots at one step."""

    slots: list[int]
    questions: list[str]
    rendered: list[list[str]]
    available: torch.Tensor  # (E, N) bool
    positions: torch.Tensor | None  # (E, N)
    q_online: torch.Tensor  # (E, N), -inf where not available
    value: torch.Tensor  # (E,) soft value from the target towers
    parts: list[StateParts] | None = None  # per state, with `top`: what the update's forward starts from


def score_step(
    env: RetrievalEnv, online: QNetwork, online_cache: ChunkCache, target: QNetwork | None = None,
    target_cache: ChunkCache | None = None, k: int = 5, alpha: float = 1.0, value_target: str = "mean",
    top: int = 0,
) -> StepScores:
    """Score every available chunk of every active slot with the hop engine, the states and scores a greedy search
    would compute, which acting then samples from; with `target`, also the soft value V(s) of each state from the
    target towers (METHOD.md §3), the bootstrap of the TD target. With `top` (`trainer.train_layers`), each state's
    trunk and anchor are encoded once (`qrag.training.model.trunk`) and both networks run only their top layers."""
    slots = env.active
    questions, rendered = env.state_texts(slots)
    taken = [env.slot(e).selected for e in slots]
    rows = range(len(slots))
    parts: list[StateParts] | None = None
    if top:
        parts = state_parts(online, questions, rendered, top)
        states = split_vectors(online, parts)  # (E, D)
    else:
        states = hops.encode_states(online, questions, rendered, online_cache.batch_size)  # (E, D)
    q, positions = hops.q_values(online, states, online_cache.corpora(env, slots), rows, taken, names=questions)
    available = torch.isfinite(q)  # (E, N) neither taken nor padding
    value = torch.zeros(len(slots), device=online.device)  # (E,)
    if target is not None and target_cache is not None:
        t_states = (split_vectors(target, parts) if parts is not None  # (E, D)
                    else hops.encode_states(target, questions, rendered, target_cache.batch_size))
        q_heads, _ = hops.q_values(target, t_states, target_cache.corpora(env, slots), rows, taken, heads=True,
                                   names=questions)  # (2, E, N)
        value = td.ensemble_soft_value(q_heads, available, k, alpha, value_target)  # type: ignore[arg-type]
    return StepScores(slots, questions, rendered, available, positions, q, value, parts)


def state_parts(qnet: QNetwork, questions: Sequence[str], rendered: Sequence[Sequence[str]], top: int,
                groups: int = ACTING_GROUPS) -> list[StateParts]:
    """Each state's `StateParts` (the trunk's output below the top `top` layers, the anchor's frozen term), one
    per state, encoded in up to `groups` batches of similar length (a bare question is not padded to a state
    holding passages)."""
    out: list[StateParts | None] = [None] * len(questions)
    with model_lock(qnet):
        inputs = qnet.tokenize_states(questions, rendered)
        for group in length_groups(inputs["attention_mask"].sum(dim=1).tolist(), groups):
            part = qnet.state_parts({k: v.to(qnet.device) for k, v in take_rows(inputs, group).items()}, top)
            for row, one in zip(group, part.rows(), strict=True):
                out[row] = one
    assert all(p is not None for p in out), "length_groups covers every row"
    return out  # type: ignore[return-value]


def split_vectors(qnet: QNetwork, parts: Sequence[StateParts], groups: int = ACTING_GROUPS) -> torch.Tensor:
    """(B, D) state vectors of `qnet` from states' parts (its top layers only), in eval mode, in up to `groups`
    batches of similar length."""
    vectors: torch.Tensor | None = None
    with model_lock(qnet), eval_mode(qnet):
        for group in length_groups([p.hidden.shape[1] for p in parts], groups):
            v = qnet.state_vectors(StateParts.cat([parts[i] for i in group]))  # (G, D)
            if vectors is None:
                vectors = v.new_empty(len(parts), v.shape[1])
            vectors[group] = v
    assert vectors is not None
    return vectors


def frozen_chunk_cache(qnet: QNetwork, store: ChunkVectorCache | None = None) -> ChunkVectorCache | None:
    """The run-long chunk-vector cache for a network whose chunk tower is frozen (None when it trains).

    Raises:
        ValueError: `store` holds the vectors of another chunk tower.
    """
    if not qnet.chunk_tower_frozen:
        return None
    if store is None:
        return ChunkVectorCache(qnet.chunk_vectors_key())
    if store.key != qnet.chunk_vectors_key():
        raise ValueError(f"the chunk-vector cache holds vectors of {store.key!r}, not of this network's chunk tower "
                         f"({qnet.chunk_vectors_key()!r}).")
    return store
