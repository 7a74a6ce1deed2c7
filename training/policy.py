"""The policies over the retrieval MDP that training runs: acting's scores (`observe`, sampled by the trainer)
and the greedy pass that validates a network (`evaluate`), both through the hop engine (`qrag.training.hops`),
with the per-slot chunk vectors they score.

Shape legend: E environments, N chunks (the longest episode among them), D dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from qrag.training import hops, td
from qrag.training.chunk_vectors import ChunkVectorCache
from qrag.training.config import EnvConfig, StateOrder
from qrag.training.data.episode import Episode
from qrag.training.env import EpisodeState, RetrievalEnv
from qrag.training.lexical import corpus_lexical
from qrag.training.qnet import QNetwork
from qrag.training.selection import evaluate_at_sf


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
class Observation:
    """Everything acting computes for the active slots at one step."""

    slots: list[int]
    questions: list[str]
    rendered: list[list[str]]
    available: torch.Tensor  # (E, N) bool
    positions: torch.Tensor | None  # (E, N)
    q_online: torch.Tensor  # (E, N), -inf where not available
    value: torch.Tensor  # (E,) soft value from the target towers


def observe(
    env: RetrievalEnv, online: QNetwork, online_cache: ChunkCache, target: QNetwork | None = None,
    target_cache: ChunkCache | None = None, k: int = 5, alpha: float = 1.0, value_target: str = "mean",
) -> Observation:
    """Score every available chunk of every active slot with the hop engine (and the soft value when `target`
    is given): the states and scores a greedy search would compute, which acting then samples from."""
    slots = env.active
    questions, rendered = env.state_texts(slots)
    taken = [env.slot(e).selected for e in slots]
    rows = range(len(slots))
    states = hops.encode_states(online, questions, rendered, online_cache.batch_size)  # (E, D)
    q, positions = hops.q_values(online, states, online_cache.corpora(env, slots), rows, taken, names=questions)
    available = torch.isfinite(q)  # (E, N) neither taken nor padding
    value = torch.zeros(len(slots), device=online.device)  # (E,)
    if target is not None and target_cache is not None:
        t_states = hops.encode_states(target, questions, rendered, target_cache.batch_size)  # (E, D)
        q_heads, _ = hops.q_values(target, t_states, target_cache.corpora(env, slots), rows, taken, heads=True,
                                   names=questions)  # (2, E, N)
        value = td.ensemble_soft_value(q_heads, available, k, alpha, value_target)  # type: ignore[arg-type]
    return Observation(slots, questions, rendered, available, positions, q, value)


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


@torch.no_grad()
def evaluate(
    qnet: QNetwork, episodes: Sequence[Episode], env_config: EnvConfig, num_envs: int = 16, batch_size: int = 128,
    store: ChunkVectorCache | None = None,
) -> dict[str, float]:
    """The greedy policy over `episodes`: the hop engine's greedy hops (argmax over the available chunks, with the
    model's lexical evidence where it weighs any, up to `max_hops`, ending an episode once its facts are in unless
    `never_terminate`), `num_envs` episodes at a time, replayed through the environment for its rewards.

    `store` (a frozen chunk tower only) serves chunk vectors already computed.
    Returns mean `return`, `fact_recall` and `fact_em` (all supporting chunks retrieved) and `steps`.
    """
    store = frozen_chunk_cache(qnet, store)
    weight = qnet.hop_settings.lexical_weight  # the hops it is served with (METHOD.md §4.5)
    done: list[EpisodeState] = []
    for start in range(0, len(episodes), num_envs):
        group = list(episodes[start : start + num_envs])
        vectors = [episode_vectors(qnet, ep, batch_size, store) for ep in group]
        lexical = [corpus_lexical(tuple(ep.chunks)) for ep in group] if weight > 0 else None
        corpora = hops.Corpora.padded(vectors, [ep.chunks for ep in group], qnet.device, lexical)

        def complete(b: int, taken: list[int], group: list[Episode] = group) -> bool:
            return set(group[b].supporting) <= set(taken)

        hopped = hops.greedy_hops(qnet, [ep.question for ep in group], corpora,
                                  [min(env_config.max_hops, ep.num_chunks) for ep in group],
                                  done=None if env_config.never_terminate else complete, batch_size=batch_size,
                                  lexical_weight=weight)
        done.extend(replay(group, [h.taken for h in hopped], env_config, qnet.config.state_order))
    n = max(1, len(done))
    return {
        "return": sum(s.episode_return for s in done) / n,
        "fact_recall": sum(s.fact_recall for s in done) / n,
        "fact_em": sum(s.completed for s in done) / n,
        "steps": sum(s.steps for s in done) / n,
    }


def validation_scores(qnet: QNetwork, episodes: Sequence[Episode], env_config: EnvConfig, num_envs: int = 16,
                      batch_size: int = 128, store: ChunkVectorCache | None = None) -> dict[str, float]:
    """What the trainer scores a network on when it validates (METHOD.md §3.8): `evaluate`'s greedy pass up to
    `max_hops`, and fact EM with exactly |SF| hops per task (`sf_em/<task>`) and on average (`sf_em`)."""
    result = evaluate(qnet, episodes, env_config, num_envs, batch_size, store)
    result.update(evaluate_at_sf(evaluate, qnet, episodes, env_config, num_envs=num_envs, batch_size=batch_size,
                                 store=store))
    return result


def replay(episodes: Sequence[Episode], actions: Sequence[list[int]], env_config: EnvConfig,
           state_order: StateOrder) -> list[EpisodeState]:
    """Play each episode's actions through the environment (its rewards and ends); each list must run exactly
    until the environment ends that episode."""
    env = RetrievalEnv(episodes, env_config, num_envs=len(episodes), auto_reset=False, state_order=state_order)
    finished: list[EpisodeState] = []
    t = 0
    while env.active:
        slots = env.active
        if any(t >= len(actions[e]) for e in slots):
            raise ValueError(f"episode actions ran out at step {t} before the environment ended the episode.")
        finished.extend(env.step([actions[e][t] for e in slots]).finished)
        t += 1
    if any(len(actions[s.episode_index]) != s.steps for s in finished):
        raise ValueError("an episode's actions run past the step where the environment ended it.")
    return sorted(finished, key=lambda s: s.episode_index)
