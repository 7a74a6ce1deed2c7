"""RULER (Hsieh et al. 2024): the 8 needle-in-a-haystack subtasks, and QA padded with distractor documents.

NIAH (BENCHMARKS.md §3): needles `One of the special magic {numbers|uuids|words} for {key} is: {value}.`
are inserted at sentence boundaries, at depths drawn from 40 evenly spaced points, into a `noise`
haystack (five fixed sentences repeated), an `essay` haystack (real prose from `text_sources`; Paul Graham
essays in the original) or a `needle` haystack (nothing but distractor needles). Episodes are
sentence-chunked as in Q-RAG: one chunk per sentence, gold = the chunks that hold a gold value.

QA: qa_1 uses SQuAD v2 paragraphs, qa_2 HotpotQA distractor paragraphs, each question's documents padded
with documents of other questions and rendered "Document i:\\n{title}\\n{text}", one chunk per document.

Example:
    >>> ep = next(iter_niah("niah_multivalue", num_sentences=80, seed=0))
    >>> len(ep.supporting), ep.num_chunks
    (4, 80)
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path
from typing import Any, Literal, get_args

from qrag.training.data.episode import Episode, EpisodeError, read_utf8
from qrag.training.data.text_sources import estimate_tokens, iter_background

NiahTask = Literal[
    "niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
    "niah_multikey_3", "niah_multivalue", "niah_multiquery",
]
NIAH_TASKS: tuple[NiahTask, ...] = get_args(NiahTask)
RulerQATask = Literal["qa_1", "qa_2"]
RULER_QA_TASKS: tuple[RulerQATask, ...] = get_args(RulerQATask)
Haystack = Literal["noise", "essay", "needle"]
Kind = Literal["words", "numbers", "uuids"]

NOISE = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")
DEPTHS: tuple[float, ...] = tuple(100 * i / 39 for i in range(40))
NEEDLE = "One of the special magic {kind} for {key} is: {value}."
QUERY = "What are all the special magic {kind} for {keys} mentioned in the provided text?"

# Stand-ins for RULER's wonderwords adjective and noun lists (keys are "adjective-noun").
ADJECTIVES = (
    "abundant", "agreeable", "ancient", "bitter", "brave", "broad", "calm", "careful", "cheerful", "clever",
    "crooked", "curious", "damp", "deep", "eager", "early", "faint", "fancy", "fierce", "flat", "fragile",
    "gentle", "giant", "glossy", "gloomy", "hollow", "humble", "hungry", "icy", "jolly", "keen", "lazy",
    "lively", "loud", "lucky", "mellow", "mighty", "narrow", "noisy", "obedient", "odd", "pale", "plain",
    "polite", "proud", "quick", "quiet", "rapid", "rare", "rough", "rusty", "shallow", "shiny", "silent",
    "sleepy", "smooth", "sore", "steady", "sticky", "swift", "tame", "tender", "tidy", "vast", "wary", "witty",
)
NOUNS = (
    "anchor", "apron", "badge", "barrel", "basket", "beacon", "blanket", "bottle", "bucket", "cabin", "candle",
    "canyon", "carpet", "castle", "ceiling", "chimney", "cloud", "compass", "cottage", "crater", "dollar",
    "engine", "feather", "fiddle", "garden", "glacier", "hammer", "harbor", "helmet", "island", "jacket",
    "kettle", "ladder", "lantern", "meadow", "mirror", "needle", "orchard", "paddle", "pebble", "pillow",
    "pocket", "puzzle", "quarry", "rabbit", "ribbon", "saddle", "shovel", "spindle", "statue", "tarp",
    "thimble", "ticket", "tunnel", "valley", "violin", "wagon", "whistle", "window", "yacht",
)


@dataclass(frozen=True)
class NiahConfig:
    """One NIAH subtask: haystack, key and value kinds, and needle counts (keys, values per key, queried)."""

    haystack: Haystack
    key: Kind
    value: Kind
    num_keys: int = 1
    num_values: int = 1
    num_queries: int = 1


NIAH_CONFIGS: dict[NiahTask, NiahConfig] = {
    "niah_single_1": NiahConfig("noise", "words", "numbers"),
    "niah_single_2": NiahConfig("essay", "words", "numbers"),
    "niah_single_3": NiahConfig("essay", "words", "uuids"),
    "niah_multikey_1": NiahConfig("essay", "words", "numbers", num_keys=4),
    "niah_multikey_2": NiahConfig("needle", "words", "numbers"),
    "niah_multikey_3": NiahConfig("needle", "uuids", "uuids"),
    "niah_multivalue": NiahConfig("essay", "words", "numbers", num_values=4),
    "niah_multiquery": NiahConfig("essay", "words", "numbers", num_keys=4, num_queries=4),
}


def check_niah_task(task: str) -> NiahTask:
    """Return `task` as a `NiahTask`, or raise a `ValueError` listing the 8 subtasks."""
    if task not in NIAH_TASKS:
        raise ValueError(f"unknown RULER NIAH subtask {task!r}; valid subtasks: {', '.join(NIAH_TASKS)}.")
    return task  # type: ignore[return-value]


def _draw(kind: Kind, rng: random.Random) -> str:
    if kind == "numbers":
        return str(rng.randint(1_000_000, 9_999_999))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def _distinct(kind: Kind, n: int, rng: random.Random, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        v = _draw(kind, rng)
        if v not in taken:
            taken.add(v)
            out.append(v)
    return out


def _haystack_stream(cfg: NiahConfig, rng: random.Random, sources: Sequence[str], taken: set[str]) -> Iterator[str]:
    if cfg.haystack == "noise":
        yield from cycle(NOISE)
    elif cfg.haystack == "essay":
        yield from iter_background(sources, rng)
    else:
        while True:
            key, value = _distinct(cfg.key, 1, rng, taken)[0], _distinct(cfg.value, 1, rng, taken)[0]
            yield NEEDLE.format(kind=cfg.value, key=key, value=value)


def niah_episode(
    task: str,
    rng: random.Random,
    *,
    num_sentences: int | None = None,
    num_tokens: int | None = None,
    sources: Sequence[str] = ("britannica", "wikipedia"),
    id: str = "",
) -> Episode:
    """One NIAH episode of `num_sentences` chunks (needles included), or filling a `num_tokens` budget.

    Raises:
        ValueError: unknown subtask, no length, or a length too small for the needles.
    """
    t = check_niah_task(task)
    cfg = NIAH_CONFIGS[t]
    if (num_sentences is None) == (num_tokens is None):
        raise ValueError("give exactly one of num_sentences or num_tokens for a RULER NIAH episode.")
    taken: set[str] = set()
    keys = _distinct(cfg.key, cfg.num_keys, rng, taken)
    needles: list[tuple[str, str]] = [(k, v) for k in keys for v in _distinct(cfg.value, cfg.num_values, rng, taken)]
    rng.shuffle(needles)
    queried = keys[: cfg.num_queries]
    needle_text = [NEEDLE.format(kind=cfg.value, key=k, value=v) for k, v in needles]
    k = len(needle_text)
    stream = _haystack_stream(cfg, rng, sources, taken)
    if num_sentences is not None:
        if num_sentences <= k:
            raise ValueError(f"num_sentences={num_sentences} is too small for {t}'s {k} needles; use more than {k}.")
        hay = [next(stream) for _ in range(num_sentences - k)]
    else:
        assert num_tokens is not None
        budget = num_tokens - sum(estimate_tokens(s) for s in needle_text)
        hay, used = [], 0
        while used < budget:
            s = next(stream)
            hay.append(s)
            used += estimate_tokens(s)
        if not hay:
            raise ValueError(f"num_tokens={num_tokens} is too small for {t}'s {k} needles.")
    # Depths from the 40 evenly spaced points, distinct while there are enough of them.
    depths = rng.sample(DEPTHS, k) if k <= len(DEPTHS) else [rng.choice(DEPTHS) for _ in range(k)]
    cuts = sorted((round(d / 100 * len(hay)), i) for i, d in enumerate(depths))
    chunks: list[str] = []
    prev = 0
    for cut, i in cuts:
        chunks.extend(hay[prev:cut])
        prev = max(prev, cut)
        chunks.append(needle_text[i])
    chunks.extend(hay[prev:])
    gold_values = [v for q in queried for kk, v in needles if kk == q]
    needle_set = set(needle_text)
    supporting = tuple(
        i for i, c in enumerate(chunks) if c in needle_set and any(v in c for v in gold_values)
    )
    meta: dict[str, Any] = {
        "source": "ruler_niah",
        "task": t,
        "answers": gold_values,
        "num_sentences": len(chunks),
        "num_tokens": sum(estimate_tokens(c) for c in chunks),
        "token_count": "words*1.3",
        "haystack": cfg.haystack,
    }
    keys_text = ", ".join(queried[:-1]) + ", and " + queried[-1] if len(queried) > 1 else queried[0]
    question = QUERY.format(kind=cfg.value, keys=keys_text)
    return Episode(question, tuple(chunks), supporting, ", ".join(gold_values), id, meta)


def iter_niah(
    task: str,
    *,
    num_sentences: int | None = None,
    num_tokens: int | str | None = None,
    seed: int = 0,
    split: str = "train",
    sources: Sequence[str] = ("britannica", "wikipedia"),
) -> Iterator[Episode]:
    """An endless deterministic stream of NIAH episodes (one generator per sample, train/test disjoint)."""
    from qrag.training.data.babilong import parse_length

    t = check_niah_task(task)
    nt = parse_length(num_tokens) if num_tokens is not None else None
    if num_sentences is None and nt is None:
        nt = 4_000  # Q-RAG trains NIAH at 4K
    i = 0
    while True:
        rng = random.Random(f"qrag-ruler/{t}/{split}/{seed}/{i}")
        yield niah_episode(t, rng, num_sentences=num_sentences, num_tokens=nt, sources=sources,
                           id=f"ruler-{t}-{split}-{seed}-{i}")
        i += 1


# --- RULER QA --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _QARecord:
    question: str
    answers: tuple[str, ...]
    docs: tuple[int, ...]  # this question's documents (into the document pool)
    gold: tuple[int, ...]  # the gold ones among them
    id: str


def _read_json(path: str | Path, what: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} file {str(p)!r} does not exist (or is not a file).")
    try:
        return json.loads(read_utf8(p))
    except json.JSONDecodeError as e:
        raise EpisodeError(f"{p}:{e.lineno}: malformed JSON ({e.msg}).") from None


def _squad(path: str | Path) -> tuple[list[str], list[_QARecord]]:
    data = _read_json(path, "SQuAD")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise EpisodeError(f"{path}: not a SQuAD file: expected an object with a 'data' list (qa_1 reads SQuAD v2).")
    docs: dict[str, int] = {}
    recs: list[_QARecord] = []
    for a, art in enumerate(data["data"]):
        for p, para in enumerate(art.get("paragraphs", [])):
            if "context" not in para or "qas" not in para:
                raise EpisodeError(f"{path}: data[{a}].paragraphs[{p}] lacks 'context' or 'qas' (SQuAD schema).")
            doc = f"{art.get('title', '')}\n{para['context']}".strip()
            d = docs.setdefault(doc, len(docs))
            for qa in para["qas"]:
                answers = tuple(dict.fromkeys(x["text"] for x in qa.get("answers", [])))
                if qa.get("is_impossible") or not answers:
                    continue  # RULER keeps answerable questions only
                recs.append(_QARecord(qa["question"], answers, (d,), (d,), str(qa.get("id", len(recs)))))
    return list(docs), recs


def _hotpot(path: str | Path) -> tuple[list[str], list[_QARecord]]:
    from qrag.training.data.qa import hotpot_paragraphs

    data = _read_json(path, "HotpotQA")
    if not isinstance(data, list):
        raise EpisodeError(f"{path}: not a HotpotQA file: expected a JSON list of records (qa_2 reads HotpotQA).")
    docs: dict[str, int] = {}
    recs: list[_QARecord] = []
    for i, rec in enumerate(data):
        titles, texts, gold = hotpot_paragraphs(rec, where=f"{path}: record {i}")
        ids = tuple(docs.setdefault(f"{t}\n{x}", len(docs)) for t, x in zip(titles, texts, strict=True))
        recs.append(_QARecord(str(rec["question"]), (str(rec.get("answer", "")),), ids,
                              tuple(ids[j] for j in gold), str(rec.get("_id", i))))
    return list(docs), recs


def iter_ruler_qa(
    task: str,
    path: str | Path,
    *,
    num_tokens: int | str | None = None,
    num_docs: int | None = None,
    seed: int = 0,
) -> Iterator[Episode]:
    """RULER QA episodes: each question's documents plus random others, shuffled, one chunk per document.

    Args:
        task: 'qa_1' (SQuAD v2 dev JSON at `path`) or 'qa_2' (HotpotQA dev-distractor JSON at `path`).
        path: The local file.
        num_tokens: Pad until the documents reach this token budget (words × 1.3); default 4K.
        num_docs: Or pad to exactly this many documents (capped by the pool).
        seed: Seed of the distractor choice and the shuffle.
    """
    from qrag.training.data.babilong import parse_length

    if task not in RULER_QA_TASKS:
        raise ValueError(f"unknown RULER QA task {task!r}; valid tasks: {', '.join(RULER_QA_TASKS)}.")
    docs, recs = _squad(path) if task == "qa_1" else _hotpot(path)
    budget = parse_length(num_tokens) if num_tokens is not None else 4_000
    for n, rec in enumerate(recs):
        rng = random.Random(f"qrag-ruler-qa/{task}/{seed}/{n}")
        chosen = list(rec.docs)
        seen = set(chosen)
        used = sum(estimate_tokens(docs[d]) for d in chosen)
        # Rejection draws cost O(drawn), not O(pool): a HotpotQA dev pool holds ~70 000 documents.
        while len(seen) < len(docs):
            if (num_docs is not None and len(chosen) >= num_docs) or (num_docs is None and used >= budget):
                break
            d = rng.randrange(len(docs))
            if d not in seen:
                seen.add(d)
                chosen.append(d)
                used += estimate_tokens(docs[d])
        rng.shuffle(chosen)
        chunks = [f"Document {i + 1}:\n{docs[d]}" for i, d in enumerate(chosen)]
        gold = set(rec.gold)
        meta = {"source": "ruler_qa", "task": task, "answers": list(rec.answers), "num_docs": len(chunks),
                "num_tokens": used, "token_count": "words*1.3"}
        yield Episode(rec.question, tuple(chunks), tuple(i for i, d in enumerate(chosen) if d in gold), rec.answers[0],
                      f"ruler-{task}-{rec.id}", meta)
