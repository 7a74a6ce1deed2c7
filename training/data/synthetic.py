"""Multi-hop training questions made from a corpus alone, by the passages that name one another (no labels, no LLM).

A passage's **subject** is its title (the `title` of a JSON Lines passage, a Markdown file's heading), else the
phrase its first sentence defines ("Metallica is an American heavy metal band" → "Metallica"). A passage **names**
another when its text holds the other's subject, matched case-sensitively as whole words, the longest subject first
at each place; subjects that are common words (the corpus also writes them in lower case) or that most passages
name (more than `MAX_NAMED_SHARE` of them) link nothing. Two kinds of questions come from those links, the two
shapes of a question whose facts must be found one after another (HotpotQA's bridges, FanOutQA's fan-outs):

- **fan-out**: a passage A naming 1 to `MAX_SPOKES` others B₁…Bₘ. Its gold passages are A and the Bᵢ: the first
  hop finds A by its subject, each later one a passage A names, read from A once it is in the state.
- **in-links**: a passage C named by 2 to `MAX_SPOKES` others. Its gold passages are C and those that name it.

The question names the group's centre (its subject, or for a share `DESCRIBED_SHARE` of fan-outs its description,
so the first hop is a search too) and the kind of the other passages: the words their first sentences share (or
hold, for one), chosen among the corpus's common content words ("Which American musicians are connected to
Metallica?"). A question is a search target, not prose: its words are what a person asking about that group
would type.

    >>> corpus = read_corpus("passages.jsonl")  # doctest: +SKIP
    >>> questions = make_questions(corpus, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from stop_words import get_stop_words

from qrag.training.data.corpus import Corpus

Kind = Literal["fan-out", "in-links"]
MAX_SPOKES = 4
"""Most passages a question's centre names (fan-out) or is named by (in-links)."""
MAX_NAMED_SHARE = 0.02
"""A subject named by more than this share of the passages (at least `MIN_COMMON_NAMED`) links nothing: a
question about everything that names it has no answer."""
MIN_COMMON_NAMED = 20
DESCRIBED_SHARE = 0.3
"""Share of fan-out questions that describe their centre instead of naming it."""
MIN_PASSAGES = 20
"""The fewest passages a corpus needs before questions are sought in it."""
MAX_SUBJECT_WORDS = 8
COMMON_SHARE = 0.5
"""A word more than this share of the passages hold says nothing of a kind."""
KIND_WORDS = 3
"""Most words that say what kind of passages a question asks for."""
_COPULA = re.compile(r"^(?P<subject>[A-Z0-9][^.;:!?]{0,80}?)\s*(?:\([^)]*\)\s*)?,?\s+(?:is|was|are|were|has been|"
                     r"refers to)\s+(?P<rest>.*)$", re.S)
_DISAMBIGUATION = re.compile(r"\s*\([^)]*\)\s*$")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")
_EDGE = "\"'“”‘’()[]{},.;:!?"
_TEMPLATES = (
    "Which {kind} are connected to {centre}?",
    "What are the {kind} related to {centre}?",
    "Name the {kind} linked with {centre}.",
    "{centre}: which {kind}?",
    "Tell me about {centre} and the {kind} it involves.",
)


class SyntheticError(ValueError):
    """A corpus from which no questions can be built; the message says what it needs."""


@dataclass(frozen=True)
class SyntheticQuestion:
    """One question built from the corpus: its text, its gold passages (rows, the centre first) and its kind."""

    question: str
    supporting: tuple[int, ...]
    kind: Kind

    def record(self, corpus: Corpus, id: str) -> dict[str, object]:
        """The questions-file line (`qrag.training.data.corpus` form) of this question."""
        return {"id": id, "question": self.question, "kind": self.kind,
                "supporting": [corpus.ids[r] for r in self.supporting]}


def subject_of(text: str, title: str | None = None) -> str | None:
    """A passage's subject: its title when it has one, else the phrase its first sentence defines (or None)."""
    if title and title.strip():
        return _DISAMBIGUATION.sub("", title.strip()) or title.strip()
    m = _COPULA.match(text.strip())
    if m is None:
        return None
    subject = m.group("subject").strip().removeprefix("The ").strip()
    return subject if 0 < len(subject.split()) <= MAX_SUBJECT_WORDS else None


def _words(text: str) -> list[str]:
    return [w.strip(_EDGE).removesuffix("'s").removesuffix("’s") for w in text.split()]


def subjects(corpus: Corpus) -> list[str | None]:
    """Each passage's subject (`subject_of`), None where it has none."""
    titles = corpus.titles or (None,) * len(corpus.texts)
    return [subject_of(t, title) for t, title in zip(corpus.texts, titles, strict=True)]


def links(corpus: Corpus, subject: Sequence[str | None] | None = None) -> list[list[int]]:
    """For each passage, the rows of the other passages it names, in the order it names them (module docstring);
    `subject`: the passages' subjects when already found (`subjects`)."""
    subject = subjects(corpus) if subject is None else subject
    lower = Counter(w for t in corpus.texts for w in set(re.findall(r"\b[a-z][a-z-]+\b", t)))
    rows_of: dict[tuple[str, ...], list[int]] = {}
    for row, s in enumerate(subject):
        if s is None or not re.search(r"[A-Za-z]", s) or len(s) < 3:
            continue
        key = tuple(_words(s))
        if len(key) == 1 and lower[key[0].lower()] >= 3 and not key[0].isupper():
            continue  # a common word ("Empire", "Opera"): the corpus writes it in lower case too
        rows_of.setdefault(key, []).append(row)
    longest = max((len(k) for k in rows_of), default=0)
    named: list[list[int]] = []
    for row, text in enumerate(corpus.texts):
        words, at = _words(text), 0
        found: list[int] = []
        while at < len(words):
            for n in range(min(longest, len(words) - at), 0, -1):
                hit = rows_of.get(tuple(words[at : at + n]))
                if hit is not None:
                    found.extend(r for r in hit[:1] if r != row and r not in found)  # a document's first passage
                    at += n
                    break
            else:
                at += 1
        named.append(found)
    cap = max(MIN_COMMON_NAMED, round(MAX_NAMED_SHARE * len(corpus.texts)))
    by = Counter(r for found in named for r in found)
    return [[r for r in found if by[r] <= cap] for found in named]


def _first_sentence(text: str) -> str:
    """Up to the first full stop after a lower-case letter, a digit or a bracket, past the first 20 characters."""
    end = re.search(r"(?<=[a-z0-9)][.!?])\s", text[20:])
    return text if end is None else text[: 20 + end.start()]


class _Vocabulary:
    """The corpus's content words by how many passages hold them: kind words are common ones, not rare names."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.df = Counter(w for t in texts for w in {w.lower() for w in _WORD.findall(t)})
        self.n = len(texts)
        self.stop = set(get_stop_words("en"))

    def common(self, word: str) -> bool:
        """A content word many passages use (a kind: 'film', 'singer'), not a function word or a rare name."""
        return len(word) > 2 and word not in self.stop and 2 <= self.df[word] <= COMMON_SHARE * self.n

    def kind(self, texts: Sequence[str], avoid: set[str]) -> list[str]:
        """Up to `KIND_WORDS` words the first sentences of `texts` share (all of them, for one), most used first."""
        counts: Counter[str] = Counter()
        order: dict[str, int] = {}
        for t in texts:
            first = _first_sentence(t)
            m = _COPULA.match(first)
            part = [w.lower() for w in _WORD.findall(m.group("rest") if m else first)]
            counts.update(set(part) - avoid)
            for w in part:
                order.setdefault(w, len(order))
        need = 1 if len(texts) == 1 else 2
        words = [w for w, c in counts.items() if c >= need and self.common(w)]
        chosen = sorted(words, key=lambda w: (-counts[w], -self.df[w], w))[:KIND_WORDS]
        return sorted(chosen, key=order.__getitem__)  # as the passages write them


def make_questions(corpus: Corpus, *, seed: int = 0, limit: int | None = None) -> list[SyntheticQuestion]:
    """Fan-out and in-link questions of `corpus` (module docstring), shuffled by `seed`, at most `limit`.

    Raises:
        SyntheticError: the corpus has fewer than `MIN_PASSAGES` passages.
    """
    n = len(corpus.texts)
    if n < MIN_PASSAGES:
        raise SyntheticError(f"the corpus {corpus.source} holds {n} passages; questions are built from passages that "
                             f"name one another, and qrag-adapt needs at least {MIN_PASSAGES} (more: a few thousand "
                             "make a good training set).")
    rng = random.Random(f"qrag-synthetic/{seed}")
    subject = subjects(corpus)
    named = links(corpus, subject)
    vocab = _Vocabulary(corpus.texts)
    naming: dict[int, list[int]] = {}
    for row, found in enumerate(named):
        for r in found:
            naming.setdefault(r, []).append(row)
    groups: list[tuple[Kind, int, list[int]]] = [("fan-out", row, found) for row, found in enumerate(named)
                                                 if 1 <= len(found) <= MAX_SPOKES]
    groups += [("in-links", row, sorted(by)) for row, by in naming.items() if 2 <= len(by) <= MAX_SPOKES]
    out: list[SyntheticQuestion] = []
    seen: set[str] = set()
    for kind, centre, spokes in groups:
        name = subject[centre]
        if name is None:
            continue
        avoid = {w.lower() for s in (name, *(subject[r] or "" for r in spokes)) for w in _WORD.findall(s)}
        words = vocab.kind([corpus.texts[r] for r in spokes], avoid)
        if not words:
            continue
        if kind == "fan-out" and rng.random() < DESCRIBED_SHARE:
            described = vocab.kind([corpus.texts[centre]], avoid | set(words))
            if len(described) >= 2:
                name = "the " + " ".join(described)
        question = rng.choice(_TEMPLATES).format(kind=" ".join(words), centre=name)
        if question in seen:
            continue
        seen.add(question)
        out.append(SyntheticQuestion(question, (centre, *spokes), kind))
    rng.shuffle(out)
    return out[:limit] if limit is not None else out
