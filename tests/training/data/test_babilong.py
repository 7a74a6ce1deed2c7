"""BabiLong-style haystacks: facts at sorted distinct slots, lengths, the official release, speed."""

from __future__ import annotations

import json
import random
from itertools import islice
from pathlib import Path

import pytest

from qrag.training.data.babi import TASKS, generate_samples, iter_samples, parse_fact
from qrag.training.data.babilong import (
    babilong_episode,
    generate_babilong,
    iter_babilong,
    parse_length,
    place_facts,
    read_babilong_release,
    sentences_for_tokens,
)
from qrag.training.data.episode import EpisodeError
from qrag.training.data.text_sources import TEXT_SOURCES, load_documents
from tests.training.data.babi_replay import replay

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def verses() -> list[str]:
    """Real KJV verses as a cheap background (no sentence splitting)."""
    return [p for d in load_documents("kjv") for p in d.paragraphs][:400]


@pytest.mark.parametrize("task", TASKS)
def test_supporting_slots_point_at_the_facts_in_story_order(task: str, verses: list[str]) -> None:
    for i, s in enumerate(generate_samples(task, 200, seed=1)):
        ep = babilong_episode(s, len(s.facts) + 60, random.Random(i), background=verses)
        assert ep.num_chunks == len(s.facts) + 60
        assert [ep.chunks[j] for j in ep.supporting] == [s.facts[j] for j in s.supporting]
        facts_in_haystack = [c for c in ep.chunks if parse_fact(c) is not None]
        assert facts_in_haystack == list(s.facts)
        assert replay(facts_in_haystack, ep.question, strict=True) == ep.answer


@pytest.mark.parametrize("task", TASKS)
def test_real_background_haystacks(task: str) -> None:
    eps = generate_babilong(task, 2, num_sentences=140, seed=0)
    for ep in eps:
        assert ep.num_chunks == 140
        assert ep.metadata["num_tokens"] > 140 * 5 and ep.metadata["token_count"] == "words*1.3"
        background = [c for c in ep.chunks if parse_fact(c) is None]
        assert len(set(background)) > 0.9 * len(background), "background must not repeat a few lines"
        assert all(parse_fact(ep.chunks[j]) is not None for j in ep.supporting)


def test_place_facts_keeps_order_and_length() -> None:
    chunks, slots = place_facts(["F0", "F1", "F2"], [f"b{i}" for i in range(10)], random.Random(0))
    assert len(chunks) == 13 and slots == sorted(set(slots))
    assert [chunks[s] for s in slots] == ["F0", "F1", "F2"]
    assert [c for c in chunks if c.startswith("b")] == [f"b{i}" for i in range(10)]


def test_token_lengths_follow_the_paper_table() -> None:
    assert [sentences_for_tokens(parse_length(x)) for x in ("1k", "4k", "32k", "128k", "1M", "10M")] == [
        50, 160, 1200, 4600, 40000, 400000,
    ]
    assert 50 < sentences_for_tokens(2000) < 160
    with pytest.raises(ValueError, match="'12q'"):
        parse_length("12q")


def test_length_too_small_for_the_facts_is_named() -> None:
    s = next(x for x in generate_samples("qa3", 50, seed=0) if len(x.facts) > 10)
    with pytest.raises(ValueError, match=rf"num_sentences=5 is too small.*{len(s.facts)} facts"):
        babilong_episode(s, 5, random.Random(0))


def test_the_stream_skips_qa5_stories_longer_than_the_haystack(verses: list[str]) -> None:
    eps = generate_babilong("qa5", 30, num_sentences=50, seed=0, split="test", background=verses)
    assert len(eps) == 30 and all(e.num_chunks == 50 and e.metadata["num_facts"] <= 50 for e in eps)
    # The ids keep the sample index: exactly the samples with more than 50 facts are missing.
    last = int(eps[-1].id.rsplit("-", 1)[1])
    samples = list(islice(iter_samples("qa5", seed=0, split="test"), last + 1))
    kept = [f"babilong-qa5-test-0-{i}" for i, s in enumerate(samples) if len(s.facts) <= 50]
    assert [e.id for e in eps] == kept and len(kept) < len(samples), "the first 30 qa5 fits should skip some"


def test_skipping_keeps_ids_and_samples_stable(verses: list[str]) -> None:
    ten = generate_babilong("qa5", 10, num_sentences=50, seed=0, split="test", background=verses)
    five = generate_babilong("qa5", 5, num_sentences=50, seed=0, split="test", background=verses)
    assert ten[:5] == five


def test_samples_that_fit_are_the_direct_episode(verses: list[str]) -> None:
    eps = generate_babilong("qa1", 20, num_sentences=50, seed=0, split="test", background=verses)
    samples = list(islice(iter_samples("qa1", seed=0, split="test"), 20))
    for i, (ep, s) in enumerate(zip(eps, samples, strict=True)):
        eid = f"babilong-qa1-test-0-{i}"
        rng = random.Random(f"qrag-babilong/qa1/test/0/{i}")
        assert ep == babilong_episode(s, 50, rng, id=eid, background=verses)


def test_a_length_no_sample_fits_raises_instead_of_skipping_forever() -> None:
    it = iter_babilong("qa5", num_sentences=1, seed=0, split="test")
    with pytest.raises(ValueError, match=r"num_sentences=1 is too small for babilong qa5: none of 1000 .*num_sentences >= 2"):
        next(it)


def test_zero_k_is_the_facts_alone() -> None:
    ep = generate_babilong("qa1", 1, seed=0)[0]
    assert all(parse_fact(c) is not None for c in ep.chunks)


def test_a_1m_token_haystack_holds_its_story_in_order(verses: list[str]) -> None:
    """Its build time is a benchmark's (`python -m qrag.training.data.bench`, docs/RESULTS.md), not a test's."""
    s = generate_samples("qa2", 1, seed=0)[0]
    ep = babilong_episode(s, 40_000, random.Random(0), background=verses)
    assert ep.num_chunks == 40_000 and ep.metadata["num_tokens"] > 500_000
    assert [c for c in ep.chunks if parse_fact(c) is not None] == list(s.facts)


def test_reads_the_official_release() -> None:
    eps = read_babilong_release(FIXTURES / "babilong_qa1_1k.jsonl", "qa1")
    assert [e.answer for e in eps] == ["office", "kitchen"]
    assert eps[0].num_chunks == 6 and eps[0].supporting == (4,)
    assert eps[0].chunks[4] == "Mary travelled to the office."
    assert eps[1].supporting == (2,) and eps[1].metadata["num_facts"] == 2


def test_release_in_the_wrong_schema(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"input": "x"}) + "\n" + json.dumps({"context": "y"}) + "\n")
    with pytest.raises(EpisodeError, match=r"bad.jsonl:1: not a BabiLong record, missing key\(s\) \['question'"):
        read_babilong_release(bad, "qa1")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_babilong_release(tmp_path / "missing.jsonl", "qa1")


@pytest.mark.slow
@pytest.mark.parametrize("num_tokens", ["1M", "10M"])
def test_real_text_haystacks_up_to_10m_tokens(num_tokens: str) -> None:
    ep = generate_babilong("qa2", 1, num_tokens=num_tokens, seed=0, sources=TEXT_SOURCES)[0]
    assert ep.num_chunks == sentences_for_tokens(parse_length(num_tokens))
