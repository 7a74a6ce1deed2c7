"""Multi-hop training questions made from a corpus alone, by the passages that name one another (no labels, no LLM).

A passage's **subject** is the first of (`subjects`):

1. its title: the `title` of a JSON Lines passage, a Markdown file's first `# heading`;
2. a title its text opens with (`title_prefix`): "Metallica: Metallica is an American heavy metal band", "Long
   jump. The long jump is …", "Paris. It is …". The words before a ": " or ". " (at most `MAX_SUBJECT_WORDS`) are a
   title when the text after restates them, whatever they are ("Gone with the Wind: Gone with the Wind is …"), or
   when they read as a title and the text after starts a sentence (a capital, a digit): a phrase with no verb as far
   as its words show, its first word capitalised (or a number) and no function word (`_FUNCTION_WORDS`) but the
   particles of names (`NAME_PARTICLES`), a leading article, an initial and a regnal "I" ("Bank of America", "1973
   oil crisis", "Charles I of England"; not "Born in Warsaw", "It rained"), before ": " prepositions and articles
   too ("Doping in sport: …"); before ". " it does not end on an initial or an abbreviation ("John F. Kennedy",
   "St. Louis"). An ordinary first sentence holds a verb or a function word, so it is none. The first restated
   title wins, else the first that reads as one; the sentences after it are the passage's first;
3. a folder file's name (`file_title`), underscores and hyphens read as spaces, in the form the file's text writes
   it as a name: "marie_curie.txt" whose text says "Marie Curie" → "Marie Curie"; a name the text never writes
   capitalised ("notes.txt", "doc_001.txt") is none, and one word counts only written so inside a sentence;
4. the phrase its first sentence defines ("Metallica is an American heavy metal band" → "Metallica").

A passage **names** another when its text holds the other's subject, matched case-sensitively as whole words, the
longest subject first at each place. A name links nothing when it is ambiguous:

- part of a longer capitalised name in the text: a capitalised word right after it, or right before it where that
  word starts no sentence and is no article or honorific, with no punctuation or possessive between them ("South
  West Africa" names no "West Africa"; "King Charlemagne" and "the Beatles' Abbey Road" name theirs);
- the subject of passages of different **documents** (`documents`: a folder's file; JSON Lines passages sharing one
  `title`; any other passage alone): "Australia" and "Australia (continent)". The passages of one document that
  share a subject are named by its first, and a passage names nothing of its own document.

Subjects that are common words (the corpus also writes them in lower case) or that most passages name (more than
`MAX_NAMED_SHARE` of them) link nothing either. Two kinds of questions come from those links, the two shapes of a
question whose facts must be found one after another (HotpotQA's bridges, FanOutQA's fan-outs):

- **fan-out**: a passage A naming 1 to `MAX_SPOKES` others B₁…Bₘ. Its gold passages are A and the Bᵢ: the first
  hop finds A by its subject, each later one a passage A names, read from A once it is in the state.
- **in-links**: passages of one kind that all name a passage C, 2 to `MAX_MEMBERS` of them ("Which countries are
  connected to Italy?": the countries whose passages name Italy). Its gold passages are those members, not C: each
  is found from the question, by its kind and the name it holds, and each found one shows the next what is asked for
  (FanOutQA's shape: entities of one kind that share a relation, none of which the question names). A passage's
  kind is the noun its definition ends on (below); passages that define nothing are in no in-link question.

The question names the group's centre (its subject, or for a share `DESCRIBED_SHARE` of fan-outs what its first
sentence says it is, "the capital and largest city of Jamaica", so the first hop is a search too) and the kind of
the other passages, in the plural (`plural`), as a person asking for them would: the nouns their definitions end
on ("Bill Murray is an American actor, comedian and writer" → "actor"), the most shared first, with the word before
the noun when all share it ("Which island countries are connected to Martinique?"); passages that define nothing
are asked for by the nouns their first sentences share. A question is a search target, not prose: its
words are what a person asking about that group would type.

The questions held out to choose a model on share no passage with the training ones (`split_held_out`): held-out
clusters are grown over the passages the questions share, from random starts, and training questions that touch a
held-out passage are dropped, so a held-out score measures passages training never showed.

    >>> corpus = read_corpus("passages.jsonl")  # doctest: +SKIP
    >>> questions = make_questions(corpus, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import heapq
import random
import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import count
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal, TypeVar

from stop_words import get_stop_words

from qrag.training.data.corpus import SUFFIXES, Corpus

if TYPE_CHECKING:
    import inflect

Kind = Literal["fan-out", "in-links"]
T = TypeVar("T")
MAX_SPOKES = 4
"""Most passages a fan-out question's centre names."""
MAX_MEMBERS = 6
"""Most passages of one kind an in-link question asks for: as many as the longest search (`MAX_HORIZON` of
`qrag.training.learn.adapt.run`) finds one hop each."""
MAX_NAMED_SHARE = 0.02
"""A subject named by more than this share of the passages (at least `MIN_COMMON_NAMED`) links nothing: a
question about everything that names it has no answer."""
MIN_COMMON_NAMED = 20
DESCRIBED_SHARE = 0.3
"""Share of fan-out questions that describe their centre instead of naming it."""
MIN_PASSAGES = 20
"""The fewest passages a corpus needs before questions are sought in it."""
MAX_SUBJECT_WORDS = 8
"""Most words of a subject (a defined phrase, a title a text opens with, a file's name)."""
NAME_PARTICLES = frozenset({"of", "the", "and", "de", "du", "des", "del", "della", "di", "da", "la", "le", "les", "van",
                            "von", "der", "den", "y", "&"})
"""The lower-case words a name holds ("Bank of America", "Charles de Gaulle"): a file's name written so is a name
(`_name_like`), and they are function words a title may hold (`_title_like`)."""
_PREPOSITIONS = frozenset("a an the in on at to for from by with as into onto about after before over under than".split())
"""Function words a title before ": " may hold ("Doping in sport: …", "Graph of a function: …"); one before ". "
may not."""
_FUNCTION_WORDS = _PREPOSITIONS | frozenset("""is are was were be been being am has have had do does did would can
could shall should might must i you he she it we they me him her us them my your his its our their this that these
those there here what which who whom whose when where why how then but or nor so if not no yes all some any each
every very also just only""".split())
"""Words of English's closed classes (pronouns, auxiliaries, prepositions, conjunctions, determiners; not "will" nor
"may", names too): a phrase that holds one (but `NAME_PARTICLES`; "I" after the first word is a numeral, "Charles
I") is no title."""
HELD_OUT_CLUSTER = 12
"""Most held-out questions one cluster holds (`split_held_out`): several clusters from random starts spread the
held-out questions over the corpus."""
COMMON_SHARE = 0.5
"""A word more than this share of the passages hold says nothing of a kind."""
KIND_WORDS = 3
"""Most words that say what kind of passages a question asks for."""
_COPULA = re.compile(r"^(?P<subject>[A-Z0-9][^.;:!?]{0,80}?)\s*(?:\([^)]*\)\s*)?,?\s+(?:is|was|are|were|has been|"
                     r"refers to)\s+(?P<rest>.*)$", re.S)
_DISAMBIGUATION = re.compile(r"\s*\([^)]*\)\s*$")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")
_EDGE = "\"'“”‘’()[]{},.;:!?"
_OPENERS = "\"'“‘([{"
_CLOSERS = "\"'”’)]}"
_ENDS_SENTENCE = ".!?:"
_ARTICLES = {"The", "A", "An"}
_HONORIFICS = {"King", "Queen", "Emperor", "Empress", "Pope", "Prince", "Princess", "Saint", "Sir", "Lord", "Lady",
               "Dame", "President", "General", "Tsar", "Sultan", "Caliph", "Pharaoh", "Dr", "Mr", "Mrs", "Ms"}
"""Capitalised words that come before a name without being part of it ("King Charlemagne", "President Lincoln")."""
_AMBIGUOUS = -1
"""`links`' mark of a name that is the subject of passages of different documents: matched, linking nothing."""
_TITLE_END = re.compile(r"[.:]\s+")
_ABBREVIATIONS = {"Mr", "Mrs", "Ms", "Dr", "St", "Ste", "Jr", "Sr", "Mt", "Ft", "Prof", "Gen", "Col", "Lt", "Sgt",
                  "Capt", "Rev", "Hon", "No", "Vol", "Inc", "Ltd", "Co", "Corp", "Bros", "vs", "etc"}
"""Words a ". " follows inside a name ("St. Louis", "Apple Inc. is"): no title ends on them."""
_FILE_ID = re.compile(rf"^(?P<file>.+(?:{'|'.join(re.escape(s) for s in SUFFIXES)}))#\d+$", re.I)
MAX_DESCRIPTION_WORDS = 10
_DEFINES = re.compile(r"(?:^|\s)(?:is|was|are|were|has been|refers to)\s+(?P<rest>.*)$", re.S)
_ARTICLE = re.compile(r"^(?:(?:one|any|each) of (?:the |many |several )?|a |an |the |any |some )", re.I)
_CLAUSE = r"which|who|whom|that|whose|where|when|while|located|known|best|founded|established|born|consisting|comprising"
_HEAD_END = re.compile(r"\s*[,;:(]|\s(?:and|or|but|of|in|on|at|from|for|by|to|with|between|as|since|during|into|"
                       rf"within|near|under|about|than|used|made|based|{_CLAUSE})\b")
_DESCRIPTION_END = re.compile(rf"\s*[,;:(]|\s(?:{_CLAUSE})\b")
_LOWER_WORD = re.compile(r"[a-z][a-z-]*[a-z]")
_COORDINATORS = {"and", "or", ","}
"""What joins two parts of a definition's head ("an island country and territory", "southernmost and largest")."""
_ADJECTIVE_ENDINGS = ("ic", "al")
"""Endings of adjectives among the words the noun lexicon does not know ("ethnolinguistic"; "music" it knows)."""
_NOT_NOUN = ("ed", "ing", "ous", "ful", "less", "able", "ible", "ly")
"""Endings of the words a definition ends on that are no noun ("written by", "religious", "belonging to")."""
_PLURAL_FIXES = (
    (r"(.*(?:[^mlpest]|[^s]t))arch", "$1archs"),  # the Greek "-arch" of rulers: monarchs; not arches, marches, searches
    (r"(.*(?:epoch|loch|ptych))", "$1s"),  # a "ch" said "k": epochs, lochs, triptychs
    (r"(.+)leman", "$1lemen"),  # noblemen, gentlemen (inflect reads them as "leman")
    (r"(.*)thief", "$1thieves"),
    (r"(.*ics)", "$1"),  # physics, politics: already plural
    (r"(.*phyl)um", "$1a"),  # phyla, subphyla (inflect: "phylums")
    (r"((?:ger|ro|nor|bur)man)", "$1s"),  # demonyms inflect knows capitalised only: "germans", not "germen"
)
"""`inflect` 7.6's plurals that are wrong, as `inflect.engine.defnoun` patterns (case-insensitive, "$1" the group)."""
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


def subject_of(text: str, title: str | None = None, file_name: str | None = None) -> str | None:
    """A passage's subject (module docstring): its title when it has one, else the title its text opens with, else
    its file's name (`file_title`, found by the caller), else the phrase its first sentence defines (or None)."""
    if title and title.strip():
        return _DISAMBIGUATION.sub("", title.strip()) or title.strip()
    opening = title_prefix(text)
    if opening is not None:
        return _DISAMBIGUATION.sub("", opening[0]) or opening[0]
    if file_name:
        return file_name
    m = _COPULA.match(text.strip())
    if m is None:
        return None
    subject = m.group("subject").strip().removeprefix("The ").strip()
    return subject if 0 < len(subject.split()) <= MAX_SUBJECT_WORDS else None


def title_prefix(text: str) -> tuple[str, str] | None:
    """The title a text opens with and the text after it ("Metallica: Metallica is …" → ("Metallica", "Metallica is
    …")), or None (module docstring): of the words before each ": " or ". " within `MAX_SUBJECT_WORDS` words, the
    first that the text after restates ("2001: A Space Odyssey: 2001: A Space Odyssey is …"), else the first that is
    `_title_like` and followed by a sentence."""
    stripped = text.strip()
    found: list[tuple[str, str, bool]] = []
    for end in _TITLE_END.finditer(stripped):
        head, rest = stripped[: end.start()].strip(), stripped[end.end() :]
        if len(head.split()) > MAX_SUBJECT_WORDS:
            break
        read = _read_title(head, rest, end.group()[0])
        if read is not None:
            found.append((head, rest, read))
    best = next((f for f in found if f[2]), found[0] if found else None)
    return None if best is None else best[:2]


def _read_title(head: str, rest: str, mark: str) -> bool | None:
    """Whether `head`, before `mark` (":" or ".") and `rest`, is a title: None when it is none (cut at an initial or an
    abbreviation, "John F. Kennedy", "St. Louis"; neither restated by `rest` nor `_title_like` and followed by a
    sentence), True when `rest` restates it, False when it is one by its words alone."""
    name = _DISAMBIGUATION.sub("", head).strip()
    if not name or not rest:
        return None
    last = name.split()[-1].strip(_EDGE)
    if mark == "." and (len(last) <= 1 or last in _ABBREVIATIONS or "." in last):
        return None
    if re.match(rf"[{_OPENERS}]?(?:The\s+)?{re.escape(name)}(?!\w)", rest):
        return True
    reads = _title_like(name, _PREPOSITIONS if mark == ":" else frozenset()) and _starts_sentence(rest)
    return False if reads else None


def _title_like(phrase: str, allowed: frozenset[str] = frozenset()) -> bool:
    """Whether a phrase can be a title (module docstring): its first word capitalised or a number, and no function
    word (`_FUNCTION_WORDS`) but the particles of names, `allowed`, a leading article, an initial ("John A.
    Macdonald") and "I" after the first word ("Charles I"): "The Hague", "Long jump", not "It rained"."""
    raw = phrase.split()
    if not raw or not _capital(raw[0].strip(_EDGE)):
        return False
    ok = NAME_PARTICLES | allowed
    for i, word in enumerate(raw):
        w = word.strip(_EDGE)
        exempt = (i == 0 and w in _ARTICLES and len(raw) > 1) or (i > 0 and w == "I") or re.fullmatch(r"[A-Z]\.", word)
        if not exempt and w.lower() in _FUNCTION_WORDS and w.lower() not in ok:
            return False
    return True


def _name_like(phrase: str) -> bool:
    """Whether a phrase is written as a name: its first word capitalised (or a number), each other one too or a
    particle of names (`NAME_PARTICLES`)."""
    words = [w.strip(_EDGE) for w in phrase.split()]
    words = [w for w in words if w]
    return bool(words) and _capital(words[0]) and all(_capital(w) or w in NAME_PARTICLES for w in words[1:])


def _capital(word: str) -> bool:
    return word[:1].isupper() or word[:1].isdigit()


def _starts_sentence(text: str) -> bool:
    """Whether `text` starts a sentence: a capital or a digit, after any opening quote or bracket."""
    return _capital(text.lstrip(_OPENERS))


def _body(text: str, title: str | None) -> str:
    """A passage's text without the title it opens with (a JSON Lines title's "{title}. ", or `title_prefix`'s): its
    first sentence is the one after it."""
    if title:
        return text.removeprefix(f"{title}. ")
    opening = title_prefix(text)
    return text if opening is None else opening[1]


def documents(corpus: Corpus) -> list[str]:
    """Each passage's document, the unit a name must not span two of (module docstring): a folder file's passages
    (ids "path/file.md#n", as `read_corpus` and `qrag-data corpus` write them) are one; JSON Lines passages sharing a
    `title` are one (a title names its document, as a heading does); any other passage is its own."""
    titles = corpus.titles or (None,) * len(corpus.texts)
    out: list[str] = []
    for pid, title in zip(corpus.ids, titles, strict=True):
        file = _FILE_ID.match(pid)
        out.append(f"file:{file.group('file')}" if file else f"title:{title}" if title else f"id:{pid}")
    return out


def file_title(path: str, text: str) -> str | None:
    """A folder file's name as a subject (module docstring): its words (underscores and hyphens read as spaces) as
    `text` (the file's passages) first writes them as a name, whole words, in any case; a one-word name only where
    no sentence starts with it. None when the name has no letter, more than `MAX_SUBJECT_WORDS` words, or `text`
    never writes it so ("notes.txt", "doc_001.txt")."""
    words = [w for w in re.split(r"[\s_-]+", PurePosixPath(path).stem) if w]
    if not words or len(words) > MAX_SUBJECT_WORDS or not any(re.search(r"[A-Za-z]", w) for w in words):
        return None
    pattern = re.compile(r"(?<![\w-])" + r"[\s_-]+".join(re.escape(w) for w in words) + r"(?![\w-])", re.I)
    for m in pattern.finditer(text):
        form = " ".join(m.group().split())
        before = text[: m.start()].rstrip().rstrip(_CLOSERS)
        if _name_like(form) and (len(words) > 1 or (before and before[-1] not in _ENDS_SENTENCE)):
            return form
    return None


def _words(text: str) -> list[str]:
    return [w.strip(_EDGE).removesuffix("'s").removesuffix("’s") for w in text.split()]


def name_key(name: str) -> tuple[str, ...]:
    """A name as `find_names` matches it: its words, without edge punctuation or a possessive."""
    return tuple(_words(name))


@dataclass(frozen=True)
class _Tokens:
    """A text's words as `find_names` reads them, and what joins each to the one before."""

    words: list[str]
    joined: list[bool]
    """Word i follows word i-1 with no punctuation, bracket, quote or possessive between them."""
    opens: list[bool]
    """Word i starts a sentence (the text's first word, or one after ".", "!", "?" or ":")."""

    @classmethod
    def of(cls, text: str) -> _Tokens:
        raw = text.split()
        ends = [r.rstrip(_CLOSERS) for r in raw]
        joined = [i > 0 and raw[i - 1] == ends[i - 1] and ends[i - 1][-1:] not in _EDGE
                  and not ends[i - 1].endswith(("'s", "’s")) and raw[i][:1] not in _OPENERS for i in range(len(raw))]
        opens = [i == 0 or ends[i - 1][-1:] in _ENDS_SENTENCE for i in range(len(raw))]
        return cls(_words(text), joined, opens)

    def in_longer_name(self, at: int, end: int) -> bool:
        """Whether words[at:end] are part of a longer capitalised span: a capitalised word joined right after them,
        or right before them where that word starts no sentence and is no article or honorific ("The Beatles",
        "King Charlemagne")."""
        w = self.words
        after = end < len(w) and self.joined[end] and w[end][:1].isupper()
        before = (at > 0 and self.joined[at] and w[at - 1][:1].isupper() and not self.opens[at - 1]
                  and w[at - 1] not in _ARTICLES and w[at - 1] not in _HONORIFICS)
        return after or before


def find_names(text: str, names: Mapping[tuple[str, ...], T], longest: int) -> Iterator[T]:
    """What `names` (keyed by `name_key`, none longer than `longest` words) gives for each name `text` holds as whole
    words, case-sensitively, in the order it holds them, the longest name first at each place; a name inside a
    longer capitalised span (`_Tokens.in_longer_name`: "West Africa" in "South West Africa") gives nothing."""
    tokens = _Tokens.of(text)
    words, at = tokens.words, 0
    while at < len(words):
        for n in range(min(longest, len(words) - at), 0, -1):
            hit = names.get(tuple(words[at : at + n]))
            if hit is not None and not tokens.in_longer_name(at, at + n):
                yield hit
                at += n
                break
        else:
            at += 1


def subjects(corpus: Corpus) -> list[str | None]:
    """Each passage's subject (`subject_of`; a folder file's name by `file_title`), None where it has none."""
    titles = corpus.titles or (None,) * len(corpus.texts)
    document = documents(corpus)
    text_of: dict[str, list[str]] = {}
    for doc, text, title in zip(document, corpus.texts, titles, strict=True):
        if doc.startswith("file:") and not title:
            text_of.setdefault(doc, []).append(text)
    named = {doc: file_title(doc.removeprefix("file:"), "\n".join(texts)) for doc, texts in text_of.items()}
    return [subject_of(t, title, named.get(doc)) for t, title, doc in zip(corpus.texts, titles, document, strict=True)]


def links(corpus: Corpus, subject: Sequence[str | None] | None = None, *, hubs: bool = False) -> list[list[int]]:
    """For each passage, the rows of the other passages it names, in the order it names them (module docstring);
    `subject`: the passages' subjects when already found (`subjects`); `hubs`: keep the passages more than
    `MAX_NAMED_SHARE` of the corpus names (the wiki source asks for the pages that name one, of one kind in one split:
    a few)."""
    subject = subjects(corpus) if subject is None else subject
    document = documents(corpus)
    lower = Counter(w for t in corpus.texts for w in set(re.findall(r"\b[a-z][a-z-]+\b", t)))
    rows_of: dict[tuple[str, ...], list[int]] = {}
    for row, s in enumerate(subject):
        if s is None or not re.search(r"[A-Za-z]", s) or len(s) < 3:
            continue
        key = name_key(s)
        if len(key) == 1 and lower[key[0].lower()] >= 3 and not key[0].isupper():
            continue  # a common word ("Empire", "Opera"): the corpus writes it in lower case too
        rows_of.setdefault(key, []).append(row)
    # a document's first passage; a name of several documents is still matched (it is no shorter name's), to nothing
    first = {k: rows[0] if len({document[r] for r in rows}) == 1 else _AMBIGUOUS for k, rows in rows_of.items()}
    longest = max((len(k) for k in first), default=0)
    named: list[list[int]] = []
    for row, text in enumerate(corpus.texts):
        found: list[int] = []
        for hit in find_names(text, first, longest):
            if hit != _AMBIGUOUS and document[hit] != document[row] and hit not in found:
                found.append(hit)
        named.append(found)
    if hubs:
        return named
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
        rest = _ARTICLE.sub("", m.group("rest").strip())
        start = 0
        for end in _HEAD_END.finditer(rest):
            words = _phrase_words(rest[start : end.start()])
            if not (words and end.group().strip() in _COORDINATORS and noun_lemmas(words[-1]) == ()):
                break  # the head, or no head; an adjective before "and" ("southernmost and least-populated
            start = end.end()  # continent") coordinates with the words after it, where the noun is
        else:
            words = _phrase_words(rest[start:])
        if not words or not _LOWER_WORD.fullmatch(words[-1]) or not self.common(words[-1]) or words[-1].endswith(
                _NOT_NOUN) or noun_lemmas(words[-1]) == ():
            return None
        before = words[-2] if len(words) > 1 and _WORD.fullmatch(words[-2]) and self.common(words[-2].lower()) else None
        return singular(words[-1]), before

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
        `KIND_WORDS` nouns they share (all of them, for one; no word the lexicon reads as an adjective), most used
        first."""
        found = [h for h in heads if h is not None and h[0] not in avoid]
        if found:
            said = [noun for noun, _ in found]
            count = Counter(said)
            nouns = sorted(count, key=lambda n: (-count[n], said.index(n)))[:2]
            befores = {before.lower() if before else None for _, before in found}
            shared = found[0][1] if count[nouns[0]] == len(firsts) and len(befores) == 1 else None  # as written
            prefix = f"{shared} " if shared is not None and shared.lower() not in avoid else ""
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
        words = [w for w, c in counts.items() if c >= need and self.common(w) and noun_lemmas(w) and not _adjective(w)]
        chosen = sorted(words, key=lambda w: (-counts[w], -self.df[w], w))[:KIND_WORDS]
        return " ".join(sorted(chosen, key=order.__getitem__)) or None  # as the passages write them


def plural(noun: str) -> str:
    """An English noun's plural ("city" → "cities", "statesman" → "statesmen", "analysis" → "analyses"), by the
    `inflect` library with the fixes of `_PLURAL_FIXES` ("monarchs", "germans"); a plural stays as it is
    ("traditions", not "traditionss")."""
    lemmas = noun_lemmas(noun.lower()) or ()
    written_plural = any(noun.lower() in _noun_plurals(lemma) for lemma in lemmas if lemma != noun.lower())
    return noun if written_plural or singular(noun) != noun else _inflect().plural_noun(noun)


def noun_lemmas(word: str) -> tuple[str, ...] | None:
    """The singulars of a lower-case word read as a noun, by the `lemminflect` lexicon ("traditions" → ("tradition",),
    "physics" → ("physics",)): () for a word it knows as no noun ("southernmost", "political", "united"). A word it
    does not know is read by its last hyphenated part ("sub-regions" → ("sub-region",), "third-largest" → ()), else
    by its ending: () for an adjective's ("ethnolinguistic", "intercontinental"), None otherwise ("eukaryote")."""
    from lemminflect import getAllLemmas

    found = getAllLemmas(word)
    if found:
        return tuple(found.get("NOUN", ()))
    head, dash, last = word.rpartition("-")
    if dash and head and last:
        inner = noun_lemmas(last)
        return None if inner is None else tuple(f"{head}-{w}" for w in inner)
    return () if word.endswith(_ADJECTIVE_ENDINGS) else None


def _noun_plurals(lemma: str) -> tuple[str, ...]:
    """The plurals the lexicon knows of a noun ("medium" → ("media", "mediums"))."""
    from lemminflect import getAllInflections

    return tuple(getAllInflections(lemma, "NOUN").get("NNS", ()))


def _adjective(word: str) -> bool:
    """Whether the lexicon reads a lower-case word as an adjective ("old", "quiet"; "farm" it does not)."""
    from lemminflect import getAllLemmas

    return "ADJ" in getAllLemmas(word)


def singular(noun: str) -> str:
    """A plural noun's singular ("organisms" → "organism"); any other word as it is ("physics", "media", "city")."""
    lemmas = noun_lemmas(noun.lower())
    return lemmas[0] if lemmas and noun.lower() not in lemmas and noun.islower() else noun


def _phrase_words(phrase: str) -> list[str]:
    """A definition's words up to `MAX_SUBJECT_WORDS`, their edge punctuation stripped."""
    return [w for w in (w.strip(_EDGE) for w in phrase.split()) if w][:MAX_SUBJECT_WORDS]


@cache
def _inflect() -> inflect.engine:
    """One `inflect` engine, made on first use (importing inflect 7.6 takes about 3 s on 2 CPU cores: only a run that
    builds questions pays it), with `_PLURAL_FIXES` defined."""
    import inflect

    engine = inflect.engine()
    for singular, many in _PLURAL_FIXES:
        engine.defnoun(singular, many)
    return engine


def fan_outs(named: Sequence[Sequence[int]], *, fewest: int = 1, most: int = MAX_SPOKES,
             kind_of: Callable[[int], Hashable] | None = None) -> list[tuple[int, list[int]]]:
    """The fan-out groups of `links`' lists (module docstring): each passage, in corpus order, with the passages it
    names, `fewest` to `most` of them, in the order it names them. With `kind_of` (a passage's kind), one group per
    kind of the passages it names, every one of that kind, in the order of each kind's first."""
    out: list[tuple[int, list[int]]] = []
    for row, found in enumerate(named):
        by: dict[Hashable, list[int]] = {}
        for r in found:
            by.setdefault(None if kind_of is None else kind_of(r), []).append(r)
        out += [(row, group) for group in by.values() if fewest <= len(group) <= most]
    return out


def in_links(named: Sequence[Sequence[int]], kind_of: Callable[[int], Hashable | None], *,
             most: int = MAX_MEMBERS) -> list[tuple[int, list[int]]]:
    """The in-link groups of `links`' lists (module docstring): for each named passage C, in the order the corpus
    first names it, the passages of one kind (`kind_of`; None: of no kind, in no group) that name C, in corpus
    order, 2 to `most` of them; a passage's groups in the order of their first passages."""
    naming: dict[int, list[int]] = {}
    for row, found in enumerate(named):
        for r in found:
            naming.setdefault(r, []).append(row)
    out: list[tuple[int, list[int]]] = []
    for centre, rows in naming.items():
        by: dict[Hashable, list[int]] = {}
        for r in rows:
            kind = kind_of(r)
            if kind is not None:
                by.setdefault(kind, []).append(r)
        out += [(centre, group) for group in by.values() if 2 <= len(group) <= most]
    return out


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
    first = [_first_sentence(_body(t, title)) for t, title in zip(corpus.texts, titles, strict=True)]
    heads = [vocab.head(f) for f in first]  # each passage's, once: the in-link groups and every kind read them
    noun = [None if h is None else h[0] for h in heads]  # the kind an in-link group shares
    groups: list[tuple[Kind, int, list[int]]] = [("fan-out", row, found)
                                                 for row, found in fan_outs(named, most=MAX_SPOKES)]
    groups += [("in-links", row, members) for row, members in in_links(named, noun.__getitem__, most=MAX_MEMBERS)]
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


@dataclass(frozen=True)
class HeldOutSplit:
    """Built questions split so that no held-out question shares a passage with a training one (`split_held_out`)."""

    train: list[SyntheticQuestion]
    held_out: list[SyntheticQuestion]
    dropped: list[SyntheticQuestion]
    """Questions in neither: not held out, yet sharing a passage with a held-out one."""


def held_out_size(questions: int, share: float, cap: int) -> int:
    """How many of `questions` to hold out: `share` of them, at least one (of one or more), at most `cap`."""
    return min(cap, max(1, round(share * questions))) if questions else 0


def split_held_out(questions: Sequence[SyntheticQuestion], *, share: float, cap: int,
                   seed: int = 0) -> HeldOutSplit:
    """Training and held-out questions that share no passage, `held_out_size` of them held out where the passages
    allow, the same for a seed.

    Held-out passages are taken in clusters over the graph of the passages the questions share (two passages of one
    question are neighbours): from a random question's passages, the least shared passage within reach first (its
    questions are the ones a cluster's edge would cut), until the cluster completes `HELD_OUT_CLUSTER` questions or
    its connected component is spent; then from another random question that touches no passage taken, until
    enough are completed. The questions completed are held out (`held_out_size` of them); a question sharing no
    passage with them is for training; the rest, across a cluster's edge, are dropped. Many small components give
    whole components and drop nothing but at the last cluster's edge; a Wikipedia-like corpus, one giant component,
    gives clusters cut from it (FanOutQA's 10 033 summaries: 120 held out of 5 401, 251 dropped). Taking the least
    shared passages first leans the held-out questions towards passages few questions hold. Each list keeps the
    questions' order.

    Raises:
        ValueError: `share` outside [0, 1] or a negative `cap`.
    """
    if not 0 <= share <= 1 or cap < 0:
        raise ValueError(f"split_held_out needs a share in [0, 1] and a cap >= 0, got share={share!r}, cap={cap!r}.")
    target = held_out_size(len(questions), share, cap) if share > 0 else 0
    asking: dict[int, list[int]] = {}  # passage row → the questions that hold it
    for i, q in enumerate(questions):
        for r in set(q.supporting):
            asking.setdefault(r, []).append(i)
    missing = [len(set(q.supporting)) for q in questions]  # passages of each question not held out yet
    held_rows: set[int] = set()
    held: list[int] = []
    starts = list(range(len(questions)))
    random.Random(f"qrag-held-out/{seed}").shuffle(starts)
    for start in starts:
        if len(held) >= target:
            break
        if held_rows.isdisjoint(questions[start].supporting):
            quota = min(HELD_OUT_CLUSTER, target - len(held))
            held += _grow_cluster(questions[start].supporting, quota, questions, asking, missing, held_rows)
    kept = set(held[:target])  # the last passage a cluster took may have completed more than it needed
    rows = {r for i in kept for r in questions[i].supporting}  # not the passages taken that complete no question
    train = [q for q in questions if rows.isdisjoint(q.supporting)]
    held_out = [q for i, q in enumerate(questions) if i in kept]
    dropped = [q for i, q in enumerate(questions) if i not in kept and not rows.isdisjoint(q.supporting)]
    return HeldOutSplit(train, held_out, dropped)


def _grow_cluster(start: Sequence[int], quota: int, questions: Sequence[SyntheticQuestion],
                  asking: Mapping[int, list[int]], missing: list[int], held_rows: set[int]) -> list[int]:
    """Passages held out from `start` (into `held_rows`), the one the fewest questions hold first among those within
    reach (ties: the first reached), until the questions they complete (`missing` counts down) reach `quota` or no
    passage is left within reach; returns the questions completed."""
    done: list[int] = []
    order = count()
    frontier = [(len(asking[r]), next(order), r) for r in start]
    heapq.heapify(frontier)
    while frontier and len(done) < quota:
        row = heapq.heappop(frontier)[2]
        if row in held_rows:
            continue
        held_rows.add(row)
        for i in asking[row]:
            missing[i] -= 1
            if missing[i] == 0:
                done.append(i)
            for r in questions[i].supporting:
                if r not in held_rows:
                    heapq.heappush(frontier, (len(asking[r]), next(order), r))
    return done
