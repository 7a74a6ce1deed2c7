"""Confusers in BabiLong haystacks: background sentences that name the story's people, rooms and objects."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from qrag.training.data.babi import parse_fact
from qrag.training.data.build import build_episodes
from qrag.training.data.config import DataConfig
from qrag.training.data.confusers import (
    CONFUSER_WORDS,
    confuser_index,
    mentions,
    pick_confusers,
    with_confusers,
)
from qrag.training.data.sources import load_episodes
from qrag.training.overlay import ConfigError


def test_mentions_matches_whole_words_names_as_written_rooms_and_objects_in_any_case() -> None:
    assert mentions("Jesus saith unto her, Mary.") == {"Mary"}
    assert mentions("The Kitchen and the garden; MILK.") == {"kitchen", "garden", "milk"}
    assert mentions("Danielle marys the kitchens of Johnson.") == set()  # no whole word
    assert mentions("the mary of the office") == {"office"}  # a name only as written


class _Pool:
    """A text source of two books (`sentence_pool`'s interface), so the index is checked in milliseconds."""

    books = [[["Mary sat down.", "The sky was grey."], ["A garden grew.", "Mary sat down."]],
             [["Nothing here.", "He took the MILK and the apple."], ["Danielle and Marys left."]]]

    def split_all(self) -> int:
        return sum(len(p) for book in self.books for p in book)

    def by_paragraph(self) -> list[list[list[str]]]:
        return self.books


@pytest.fixture()
def two_books(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every text source reads as `_Pool`'s two books for the confuser index (the real index splits every book:
    seconds from the disk cache, a minute without it; the slow tests read it)."""
    from qrag.training.data import confusers, text_sources

    def two_books_sentences(sources: tuple[str, ...]) -> tuple[str, ...]:
        with monkeypatch.context() as inside:  # the index's text alone: haystack backgrounds stay the real books
            inside.setattr(text_sources, "sentence_pool", lambda name: _Pool())
            return text_sources.distinct_sentences(sources)

    monkeypatch.setattr(confusers, "distinct_sentences", two_books_sentences)
    confusers.confuser_index.cache_clear()
    confusers._candidates.cache_clear()
    yield
    confusers.confuser_index.cache_clear()
    confusers._candidates.cache_clear()


@pytest.mark.usefixtures("two_books")
def test_the_index_is_every_distinct_mentioning_sentence_in_reading_order() -> None:
    index = confuser_index(("two books",))
    assert index["Mary"] == ("Mary sat down.",)  # once, though the text holds it twice
    assert index["garden"] == ("A garden grew.",)
    assert index["milk"] == index["apple"] == ("He took the MILK and the apple.",)
    assert index["Daniel"] == () and index["hallway"] == ()  # no whole word, no mention
    assert set(index) == set(CONFUSER_WORDS)
    picks = pick_confusers(("Mary took the apple.",), 5, random.Random(0), sources=("two books",))
    assert sorted(set(picks)) == ["He took the MILK and the apple.", "Mary sat down."] and len(picks) == 5


@pytest.mark.slow
def test_the_index_holds_every_mentioning_sentence_of_the_text_and_only_those() -> None:
    index = confuser_index()
    daniel = index["Daniel"]
    assert "A second Daniel, a Daniel, Jew!" in daniel  # the Merchant of Venice, a 10M haystack's confuser
    assert len(daniel) == len(set(daniel)) > 20
    for word, sentences in index.items():
        assert all(word in mentions(s) for s in sentences)
    assert index["hallway"] == ()  # no book names it


@pytest.mark.slow
def test_picks_mention_the_storys_words_are_distinct_and_deterministic() -> None:
    story = ("Daniel went to the garden.", "Where is Daniel?")
    picks = pick_confusers(story, 30, random.Random(3))
    assert len(picks) == len(set(picks)) == 30
    assert all(mentions(p) & {"Daniel", "garden"} for p in picks)
    assert pick_confusers(story, 30, random.Random(3)) == picks
    assert pick_confusers(("Sandra went to the hallway.",), 5, random.Random(0)) == []  # nothing names them
    assert pick_confusers(story, 0, random.Random(0)) == []
    many = pick_confusers(("Jeff went to the hallway.",), 50, random.Random(0))  # two sentences name Jeff
    assert len(many) == 50 and len(set(many)) == len(confuser_index()["Jeff"])


@pytest.mark.usefixtures("two_books")
def test_with_confusers_replaces_that_share_of_the_slots_and_keeps_the_rest_in_order() -> None:
    background = [f"Plain sentence number {i} of the text." for i in range(40)]
    out = with_confusers(background, 0.25, ("Mary moved to the office.",), random.Random(1))
    replaced = [i for i, (a, b) in enumerate(zip(background, out, strict=True)) if a != b]
    assert len(out) == 40 and len(replaced) == 10
    assert all(mentions(out[i]) & {"Mary", "office"} for i in replaced)
    assert background == [f"Plain sentence number {i} of the text." for i in range(40)]  # not changed in place


@pytest.mark.usefixtures("two_books")
def test_haystacks_with_confusers_keep_their_story_and_zero_changes_nothing() -> None:
    kw = {"task": "qa2", "split": "train", "num_samples": 4, "num_sentences": 200, "filler_sentences": 2000}
    plain = load_episodes("babilong", **kw)
    assert load_episodes("babilong", confusers=0.0, **kw) == plain  # byte-identical to no confusers at all
    hard = load_episodes("babilong", confusers=0.3, **kw)
    for p, h in zip(plain, hard, strict=True):
        assert (h.question, h.answer, h.num_chunks) == (p.question, p.answer, 200)
        assert [h.chunks[i] for i in h.supporting] == [p.chunks[i] for i in p.supporting]
        story = [c for c in h.chunks if parse_fact(c) is not None]  # the story's facts, in order
        assert story == [c for c in p.chunks if parse_fact(c) is not None]
        story_words = set().union(*(mentions(t) for t in (*story, h.question)))
        named = [c for c in h.chunks if parse_fact(c) is None and mentions(c) & story_words]
        assert len(named) >= round(0.3 * (200 - len(story)))  # a random sentence may name one too
        assert h.metadata["confusers"] == 0.3
    assert load_episodes("babilong", confusers=0.3, **kw) == hard


@pytest.mark.usefixtures("two_books")
def test_training_and_validation_get_confusers_from_the_data_config() -> None:
    data = DataConfig(source="babilong", task="qa1", num_sentences=80, num_train=3, num_val=2, confusers=0.25)
    train, val = build_episodes(data)
    for ep in (*train, *val):
        assert ep.metadata["confusers"] == 0.25
        assert sum(bool(mentions(c)) for c in ep.chunks) >= 19


def test_bad_shares_are_named() -> None:
    with pytest.raises(ConfigError, match=r"data.confusers must be a share in \[0, 1\) .*got 1.0"):
        DataConfig(source="babilong", confusers=1.0).validate()
    with pytest.raises(ConfigError, match=r"data.confusers must be a share .*got -0.1"):
        DataConfig(source="babilong", confusers=-0.1).validate()
    with pytest.raises(ConfigError, match="applies to the babilong source only, not 'babi'"):
        DataConfig(source="babi", confusers=0.2).validate()
    with pytest.raises(ValueError, match=r"confusers must be a share in \[0, 1\), got 2"):
        load_episodes("babilong", task="qa1", num_samples=1, num_sentences=60, confusers=2)
