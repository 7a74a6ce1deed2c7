"""A tiny two-hop retrieval task for learning tests: the second hop needs what the first retrieved.

"Where is the cup?" → "bob has the cup." → "bob is at the park." Each episode has three people, each
holding one object and standing in one place; the six facts are shuffled.
"""

from __future__ import annotations

import random

from training.data.episode import Episode

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
