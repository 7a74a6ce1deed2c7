"""Confusers: background sentences that name a bAbI story's people, rooms and objects.

At 10M tokens a BabiLong haystack holds every sentence of the text sources several times over, among them the
1 307 that name bAbI's people ("Jesus saith unto her, Mary.", "A second Daniel, a Daniel, Jew!"), rooms or
objects. A short training haystack of random background almost never holds one, so a network trained on them has
never been asked to rank "Mary moved to the office." above "Jesus saith unto her, Mary."; at 10M most questions
ask it (docs/LEARNER.md, "Confusers").

`confuser_index` finds, once per process, every distinct sentence of the text sources that mentions a word of
the bAbI vocabulary (`CONFUSER_WORDS`: whole words; names as written, rooms and objects in any case);
`pick_confusers` draws a haystack's confusers among the sentences that mention a word of its own story.
`babilong_episode(confusers=share)` puts them in that share of the background slots (training and validation
haystacks, `data.confusers`; the test split's haystacks keep the text as it comes).

The same books serve training and test backgrounds (as the filler always has): a confuser met in training can
meet the network again in a 10M-token test haystack. The stories and questions are disjoint between splits.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from qrag.training.data.babi import ACTORS, ACTORS_QA5, OBJECTS, ROOMS
from qrag.training.data.text_sources import TEXT_SOURCES, distinct_sentences

NAMES: tuple[str, ...] = tuple(dict.fromkeys(ACTORS + ACTORS_QA5))
CONFUSER_WORDS: tuple[str, ...] = NAMES + ROOMS + OBJECTS
"""The words a story can name: its people (as written), rooms and objects (any case)."""

_PATTERNS: dict[str, re.Pattern[str]] = {
    w: re.compile(rf"\b{w}\b", 0 if w in NAMES else re.IGNORECASE) for w in CONFUSER_WORDS
}


def mentions(text: str) -> set[str]:
    """The `CONFUSER_WORDS` that `text` names as whole words."""
    return {w for w, p in _PATTERNS.items() if p.search(text)}


@lru_cache(maxsize=4)
def confuser_index(sources: tuple[str, ...] = TEXT_SOURCES) -> dict[str, tuple[str, ...]]:
    """Word -> the distinct sentences of `sources` that mention it, in reading order (every source split in
    full, from the disk cache of `text_sources` when there)."""
    index: dict[str, list[str]] = {w: [] for w in CONFUSER_WORDS}
    for sentence in distinct_sentences(sources):
        for w in mentions(sentence):
            index[w].append(sentence)
    return {w: tuple(s) for w, s in index.items()}


def pick_confusers(texts: Iterable[str], k: int, rng: random.Random,
                   sources: Sequence[str] = TEXT_SOURCES) -> list[str]:
    """`k` sentences of `sources` that mention a word the `texts` (a story's facts and question) mention: distinct
    while there are enough, drawn again when there are not; none when no sentence mentions any of its words."""
    words = set().union(*(mentions(t) for t in texts)) if k > 0 else set()
    if not words:
        return []
    candidates = _candidates(frozenset(words), tuple(sources))
    if not candidates:
        return []
    if k <= len(candidates):
        return rng.sample(candidates, k)
    return [rng.choice(candidates) for _ in range(k)]


@lru_cache(maxsize=4096)
def _candidates(words: frozenset[str], sources: tuple[str, ...]) -> tuple[str, ...]:
    """The distinct sentences of `sources` that mention any of `words`, sorted (the same draw in any process);
    memoised, since thousands of training stories share a few hundred word sets."""
    index = confuser_index(sources)
    return tuple(sorted({s for w in words for s in index[w]}))


def with_confusers(background: list[str], share: float, texts: Iterable[str], rng: random.Random,
                   sources: Sequence[str] = TEXT_SOURCES) -> list[str]:
    """`background` with round(`share` × its length) random slots given to confusers of `texts` (a new list)."""
    k = round(share * len(background))
    picked = pick_confusers(texts, k, rng, sources)
    out = list(background)
    for slot, sentence in zip(rng.sample(range(len(out)), len(picked)), picked, strict=True):
        out[slot] = sentence
    return out
