"""Evaluation: the greedy policy over validation episodes, and the scores the trainer selects checkpoints on.

The greedy pass runs through the hop engine a served model uses; `validation_scores` adds fact EM at exactly
|SF| hops per task.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from qrag.training.data.episode import Episode
from qrag.training.learn.acting import episode_vectors, frozen_chunk_cache
from qrag.training.learn.checkpoint_selection import evaluate_at_sf
from qrag.training.learn.config import EnvConfig
from qrag.training.learn.env import EpisodeState, RetrievalEnv
from qrag.training.model.config import StateOrder
from qrag.training.model.qnet import QNetwork
from qrag.training.search import hops
from qrag.training.search.chunk_vectors import ChunkVectorCache
from qrag.training.search.index import weighs_pairs
from qrag.training.search.lexical import corpus_lexical


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
        lexical = [corpus_lexical(tuple(ep.chunks), pairs=weighs_pairs(qnet)) for ep in group] if weight > 0 else None
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
