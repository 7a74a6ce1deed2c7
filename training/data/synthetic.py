"""Multi-hop training questions made from a corpus alone, by the passages that name one another (no labels, no LLM).

A passage's **subject** is its title (the `title` of a JSON Lines passage, a Markdown file's heading), else the
phrase its first sentence defines ("Metallica is an American heavy metal band" → "Metallica"). A passage **names**
another when its text holds the other's subject, matched case-sensitively as whole words, the longest subject first
at each place; subjects that are common words (the corpus also writes them in lower case) or that most passages
name (more than `MAX_NAMED_SHARE` of them) link nothing. Two kinds of questions come from those links, the two
shapes of a question whose facts must be found one after another (HotpotQA's bridges, FanOutQA's fan-outs):

- **fan-out**: a passage A naming 1 to `MAX_SPOKES` others B₁…Bₘ. Its gold passages are A and the Bᵢ: the first
  hop finds A by its subject, each later one a passage A names, read from A once it is in the state.
- **in-links**: passages of one kind that all name a passage C, 2 to `MAX_MEMBERS` of them ("Which countries are
  connected to Italy?": the countries whose passages name Italy). Its gold passages are those members, not C: each
  is found from the question, by its kind and the name it holds, and each found one shows the next what is asked for
  (FanOutQA's shape: entities of one kind that share a relation, none of which the question names). A passage's
  kind is the noun its definition ends on (below); passages that define nothing are in no in-link question.

The question names the group's centre (its subject, or for a share `DESCRIBED_SHARE` of fan-outs what its first
sentence says it is, "the capital and largest city of Jamaica", so the first hop is a search too) and the kind of
the other passages, in the plural, as a person asking for them would: the nouns their definitions end on ("Bill
Murray is an American actor, comedian and writer" → "actor"), the most shared first, with the word before the noun
when all share it ("Which island countries are connected to Martinique?"); passages that define nothing are asked
for by the content words their first sentences share. A question is a search target, not prose: its words are what
a person asking about that group would type.

    >>> corpus = read_corpus("passages.jsonl")  # doctest: +SKIP
    >>> questions = make_questions(corpus, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from stop_words import get_stop_words

from qrag.training.data.corpus import Corpus

Kind = Literal["fan-out", "in-links"]
T = TypeVar("T")
MAX_SPOKES = 4
"""Most passages a fan-out question's centre names."""
MAX_MEMBERS = 6
"""Most passages of one kind an in-link question asks for: as many as the longest search (`MAX_HORIZON` of
`qrag.training.learn.adapt`) finds one hop each."""
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
MAX_DESCRIPTION_WORDS = 10
_DEFINES = re.compile(r"(?:^|\s)(?:is|was|are|were|has been|refers to)\s+(?P<rest>.*)$", re.S)
_ARTICLE = re.compile(r"^(?:(?:one|any|each) of (?:the |many |several )?|a |an |the |any |some )", re.I)
_CLAUSE = r"which|who|whom|that|whose|where|when|while|located|known|best|founded|established|born|consisting|comprising"
_HEAD_END = re.compile(r"\s*[,;:(]|\s(?:and|or|but|of|in|on|at|from|for|by|to|with|between|as|since|during|into|"
                       rf"within|near|under|about|than|used|made|based|{_CLAUSE})\b")
_DESCRIPTION_END = re.compile(rf"\s*[,;:(]|\s(?:{_CLAUSE})\b")
_LOWER_WORD = re.compile(r"[a-z][a-z-]*[a-z]")
_NOT_NOUN = ("ed", "ing", "ous", "ful", "less", "able", "ible", "ly")
"""Endings of the words a definition ends on that are no noun ("written by", "religious", "belonging to")."""
_IRREGULAR = {"person": "people", "man": "men", "woman": "women", "child": "children", "mouse": "mice",
              "goose": "geese", "tooth": "teeth", "foot": "feet", "leaf": "leaves", "wife": "wives", "life": "lives",
              "knife": "knives", "thief": "thieves", "wolf": "wolves", "shelf": "shelves", "half": "halves",
              "criterion": "criteria", "phenomenon": "phenomena", "genus": "genera"}
_NOT_COMPOUND_MAN = {"german", "shaman", "talisman", "caiman", "cayman", "ottoman", "walkman", "doberman", "desman",
                     "dolman"}
"""Nouns ending in "man" after 3 letters or more that are no compound of it ("shamans", not "shamen"; shorter ones,
"human", "roman", are none by `plural`'s length rule)."""
_TEMPLATES = (
    "Which {kind} are connected to {centre}?",
    "What {kind} are associated with {centre}?",
    "List the {kind} related to {centre}.",
    "Name the {kind} linked with {centre}.",
    "{centre}: which {kind} are involved?",
    "What do the {kind} connected to {centre} have in common?",
)


class SyntheticError(ValueError):
    """A corpus from which no questions can be built; the message says what it needs."""


@dataclass(frozen=True)
class SyntheticQuestion:
    """One question built from the corpus: its text, its gold passages (rows; a fan-out's centre first) and its kind."""

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


def name_key(name: str) -> tuple[str, ...]:
    """A name as `find_names` matches it: its words, without edge punctuation or a possessive."""
    return tuple(_words(name))


def find_names(text: str, names: Mapping[tuple[str, ...], T], longest: int) -> Iterator[T]:
    """What `names` (keyed by `name_key`, none longer than `longest` words) gives for each name `text` holds as whole
    words, case-sensitively, in the order it holds them, the longest name first at each place."""
    words, at = _words(text), 0
    while at < len(words):
        for n in range(min(longest, len(words) - at), 0, -1):
            hit = names.get(tuple(words[at : at + n]))
            if hit is not None:
                yield hit
                at += n
                break
        else:
            at += 1


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
        key = name_key(s)
        if len(key) == 1 and lower[key[0].lower()] >= 3 and not key[0].isupper():
            continue  # a common word ("Empire", "Opera"): the corpus writes it in lower case too
        rows_of.setdefault(key, []).append(row)
    longest = max((len(k) for k in rows_of), default=0)
    named: list[list[int]] = []
    for row, text in enumerate(corpus.texts):
        found: list[int] = []
        for hit in find_names(text, rows_of, longest):
            found.extend(r for r in hit[:1] if r != row and r not in found)  # a document's first passage
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

    def head(self, first: str) -> tuple[str, str | None] | None:
        """The noun a first sentence says its subject is, and the word before it ("Jamaica is an island country in
        the Caribbean" → ("country", "island")): the last word of its definition before a preposition, a
        conjunction or a clause; None when that word is no common lower-case noun of the corpus."""
        m = _DEFINES.search(first)
        if m is None:
            return None
        phrase = _HEAD_END.split(_ARTICLE.sub("", m.group("rest").strip()), maxsplit=1)[0]
        words = [w.strip(_EDGE) for w in phrase.split()]
        words = [w for w in words if w][:MAX_SUBJECT_WORDS]
        if not words or not _LOWER_WORD.fullmatch(words[-1]) or not self.common(words[-1]) or words[-1].endswith(
                _NOT_NOUN):
            return None
        before = words[-2] if len(words) > 1 and _WORD.fullmatch(words[-2]) and self.common(words[-2].lower()) else None
        return words[-1], before

    def description(self, first: str) -> str | None:
        """What a first sentence says its subject is, up to its first clause ("the capital and largest city of
        Jamaica"), at most `MAX_DESCRIPTION_WORDS` words; None without a definition of at least two words."""
        m = _DEFINES.search(first)
        if m is None:
            return None
        words = _DESCRIPTION_END.split(m.group("rest").strip(), maxsplit=1)[0].strip(" .").split()
        while words and words[-1].lower() in self.stop:  # "a game for two players in" (which …)
            words.pop()
        return " ".join(words) if 2 <= len(words) <= MAX_DESCRIPTION_WORDS else None

    def kind(self, firsts: Sequence[str], heads: Sequence[tuple[str, str | None] | None], avoid: set[str]) -> str | None:
        """What kind of passages `firsts` (their first sentences; `heads`, their `head`s) are, in the plural, as a
        person would ask for them ("island countries", "cities and empires"): the nouns their definitions end on, the
        most shared first (two at most), with the word before the noun when every passage has the same one; else up to
        `KIND_WORDS` content words they share (all of them, for one), most used first."""
        found = [h for h in heads if h is not None and h[0] not in avoid]
        if found:
            said = [noun for noun, _ in found]
            count = Counter(said)
            nouns = sorted(count, key=lambda n: (-count[n], said.index(n)))[:2]
            befores = {before.lower() if before else None for _, before in found}
            shared = befores.pop() if count[nouns[0]] == len(firsts) and len(befores) == 1 else None
            prefix = f"{shared} " if shared is not None and shared not in avoid else ""
            return prefix + " and ".join(plural(n) for n in nouns)
        counts: Counter[str] = Counter()
        order: dict[str, int] = {}
        for first_sentence in firsts:
            m = _COPULA.match(first_sentence)
            part = [w.lower() for w in _WORD.findall(m.group("rest") if m else first_sentence)]
            counts.update(set(part) - avoid)
            for w in part:
                order.setdefault(w, len(order))
        need = 1 if len(firsts) == 1 else 2
        words = [w for w, c in counts.items() if c >= need and self.common(w)]
        chosen = sorted(words, key=lambda w: (-counts[w], -self.df[w], w))[:KIND_WORDS]
        return " ".join(sorted(chosen, key=order.__getitem__)) or None  # as the passages write them


def plural(noun: str) -> str:
    """An English noun's plural by the regular rules and a few common exceptions ("city" → "cities", "statesman" →
    "statesmen")."""
    if noun in _IRREGULAR:
        return _IRREGULAR[noun]
    for one, many in (("woman", "women"), ("man", "men")):  # "statesman" → "statesmen", "businesswoman" → "…women"
        if noun.endswith(one) and len(noun) - len(one) >= 3 and noun not in _NOT_COMPOUND_MAN:
            return noun[: -len(one)] + many
    if noun.endswith(("ss", "us", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("is"):
        return noun[:-2] + "es"  # "analysis" → "analyses"
    if noun.endswith("s"):
        return noun  # "species", "series", a noun already plural
    if noun.endswith("y") and len(noun) > 1 and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _same_kind(rows: Sequence[int], heads: Sequence[tuple[str, str | None] | None]) -> list[list[int]]:
    """`rows` by the noun their definitions end on (rows without one in none), each group of 2 to `MAX_MEMBERS`,
    in the order of their first rows."""
    by: dict[str, list[int]] = {}
    for r in rows:
        h = heads[r]
        if h is not None:
            by.setdefault(h[0], []).append(r)
    return [g for g in by.values() if 2 <= len(g) <= MAX_MEMBERS]


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
    titles = corpus.titles or (None,) * n
    first = [_first_sentence(t.removeprefix(f"{title}. ") if title else t) for t, title in zip(corpus.texts, titles,
                                                                                               strict=True)]
    heads = [vocab.head(f) for f in first]  # each passage's, once: the in-link groups and every kind read them
    naming: dict[int, list[int]] = {}
    for row, found in enumerate(named):
        for r in found:
            naming.setdefault(r, []).append(row)
    groups: list[tuple[Kind, int, list[int]]] = [("fan-out", row, found) for row, found in enumerate(named)
                                                 if 1 <= len(found) <= MAX_SPOKES]
    groups += [("in-links", row, members) for row, by in naming.items() for members in _same_kind(sorted(by), heads)]
    out: list[SyntheticQuestion] = []
    seen: set[str] = set()
    for kind, centre, spokes in groups:
        name = subject[centre]
        if name is None:
            continue
        avoid = {w.lower() for s in (name, *(subject[r] or "" for r in spokes)) for w in _WORD.findall(s)}
        what = vocab.kind([first[r] for r in spokes], [heads[r] for r in spokes], avoid)
        if what is None:
            continue
        if kind == "fan-out" and rng.random() < DESCRIBED_SHARE:
            described = vocab.description(first[centre])
            if described is not None:
                name = re.sub(r"^(?:a|an)\s", "the ", described)
        question = rng.choice(_TEMPLATES).format(kind=what, centre=name)
        if question in seen:
            continue
        seen.add(question)
        out.append(SyntheticQuestion(question, (centre, *spokes) if kind == "fan-out" else tuple(spokes), kind))
    rng.shuffle(out)
    return out[:limit] if limit is not None else out
