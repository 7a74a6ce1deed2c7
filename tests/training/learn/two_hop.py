"""A tiny two-hop retrieval task for learning tests: the second hop needs what the first retrieved.

"Where is the cup?" → "bob has the cup." → "bob is at the park." Each episode has three people, each
holding one object and standing in one place; the six facts are shuffled.
"""

from __future__ import annotations

import random

from qrag.training.data.episode import Episode
from qrag.training.learn.config import TrainConfig

PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "henry"]
OBJECTS = ["ball", "cup", "key", "book", "hat", "pen", "lamp", "coin"]
PLACES = ["park", "school", "beach", "farm", "shop", "lake", "mill", "port"]


def make_two_hop_episodes(n: int, seed: int, people: int = 3, vocab: int = 8) -> list[Episode]:
    """`n` episodes of `people` people (2·people chunks), names drawn from the first `vocab` of each list."""
    rng = random.Random(seed)
    episodes = []
    for i in range(n):
        who = rng.sample(PEOPLE[:vocab], people)
        what = rng.sample(OBJECTS[:vocab], people)
        where = rng.sample(PLACES[:vocab], people)
        facts = [(f"{p} has the {o}.", ("has", j)) for j, (p, o) in enumerate(zip(who, what, strict=True))]
        facts += [(f"{p} is at the {pl}.", ("at", j)) for j, (p, pl) in enumerate(zip(who, where, strict=True))]
        rng.shuffle(facts)
        chunks = [text for text, _ in facts]
        supporting = (facts.index(next(f for f in facts if f[1] == ("has", 0))),
                      facts.index(next(f for f in facts if f[1] == ("at", 0))))
        episodes.append(Episode(f"where is the {what[0]}?", chunks, supporting, where[0], f"two-hop-{seed}-{i}"))
    return episodes


def learning_config(encoder: str, output_dir: str, seed: int = 0, scale: float = 1.0) -> TrainConfig:
    """The end-to-end learning test's training run (tests/training/learn/test_learning.py, experiments/learning_seeds.py)."""
    return TrainConfig.from_dict({
        "model": {"encoder": encoder, "max_chunk_tokens": 16, "max_state_piece_tokens": 16, "scale": scale},
        "env": {"max_hops": 2},
        "rl": {"lam": 0.5, "alpha": 0.05, "tau": 0.1},
        "optim": {"lr": 1e-3, "warmup_steps": 10, "schedule": "constant"},
        "trainer": {"output_dir": output_dir, "total_transitions": 6000, "num_envs": 16,
                    "rollout_steps": 2, "minibatch_size": 32, "update_epochs": 2, "eval_every": 1000,
                    "save_every": 10**6, "log_every": 10**6, "progress": False, "seed": seed},
    })


def with_lure(episodes: list[Episode], seed: int) -> list[Episode]:
    """Each episode plus a lure chunk "the <object>." at a random place: it answers nothing, but a random
    tiny BERT ranks it above every fact at hop 1 (measured: first in 98 % of episodes)."""
    rng = random.Random(seed)
    out = []
    for ep in episodes:
        obj = ep.question.split()[-1].rstrip("?")
        at = rng.randrange(len(ep.chunks) + 1)
        chunks = [*ep.chunks[:at], f"the {obj}.", *ep.chunks[at:]]
        supporting = tuple(sorted(i + (i >= at) for i in ep.supporting))
        out.append(Episode(ep.question, chunks, supporting, ep.answer, ep.id))
    return out


def exploration_config(encoder: str, output_dir: str, explore: bool, transitions: int = 800,
                       margin_weight: float = 0.0) -> TrainConfig:
    """The exploration test's run: METHOD.md's scale /10 makes a random tiny BERT's Q-values small (about
    0.26, below the completion reward), so greedy acting is not pushed off the lure by optimism; `explore`
    adds a uniform warm-up and ε over the top-k, `margin_weight` the large-margin loss on the supporting
    facts, everything else equal."""
    rl: dict[str, object] = {"lam": 0.5, "alpha": 0.05, "tau": 0.1, "act_temperature": 1e-4,
                             "margin_weight": margin_weight}
    if explore:
        rl.update(learning_starts=transitions // 2, act_epsilon=0.5)
    return TrainConfig.from_dict({
        "model": {"encoder": encoder, "max_chunk_tokens": 16, "max_state_piece_tokens": 16, "scale": 10.0},
        "env": {"max_hops": 2},
        "rl": rl,
        "optim": {"lr": 1e-3, "warmup_steps": 10, "schedule": "constant"},
        "trainer": {"output_dir": output_dir, "total_transitions": transitions, "num_envs": 16,
                    "rollout_steps": 2, "minibatch_size": 32, "update_epochs": 2, "eval_every": 400,
                    "save_every": 10**6, "log_every": 10**6, "progress": False, "seed": 0},
    })
