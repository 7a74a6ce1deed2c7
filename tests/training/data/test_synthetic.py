"""Questions built from a corpus alone: subjects, the links between passages, and the fan-out and in-link questions
made from them, checked by hand on a small corpus whose links are known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qrag.training.data.corpus import Corpus, read_corpus
from qrag.training.data.synthetic import (
    MIN_PASSAGES,
    SyntheticError,
    links,
    make_questions,
    plural,
    subject_of,
)


def _corpus(rows: list[tuple[str, str, str | None]]) -> Corpus:
    titles = tuple(t for _, _, t in rows)
    return Corpus(tuple(i for i, _, _ in rows), tuple(f"{t}. {x}" if t else x for _, x, t in rows), "test",
                  titles if any(titles) else None)


BANDS = [("Iron Lantern", ["Ada Stone", "Bram Holt"]), ("Night Orchard", ["Cleo Marsh", "Dov Reyes"]),
         ("Salt Engine", ["Ezra Vale", "Fen Oduya"])]
CITIES = {"Ada Stone": "Port Ellis", "Bram Holt": "Port Ellis", "Cleo Marsh": "Kestrel Bay", "Dov Reyes": "Kestrel Bay",
          "Ezra Vale": "Port Ellis", "Fen Oduya": "Kestrel Bay"}


def band_corpus(extra: int = 20) -> Corpus:
    """Bands that name their two musicians, musicians that name their city, two cities, and filler passages about
    common things (each band, musician and city is written as a title-cased name)."""
    rows: list[tuple[str, str, str | None]] = []
    for band, members in BANDS:
        rows.append((band, f"{band} is an English rock band formed by {members[0]} and {members[1]}.", band))
    for person, city in CITIES.items():
        rows.append((person, f"{person} is an English rock guitarist and singer born in {city}.", person))
    for city in ("Port Ellis", "Kestrel Bay"):
        rows.append((city, f"{city} is a coastal town with a harbour and a music hall.", city))
    rows += [(f"filler-{i}", f"Filler passage number {i} is about weather and a harbour.", None) for i in range(extra)]
    return _corpus(rows)


def test_a_subject_is_the_title_else_what_the_first_sentence_defines() -> None:
    assert subject_of("whatever", "Mercury (planet)") == "Mercury"  # the disambiguation is not part of the name
    assert subject_of("Metallica is an American heavy metal band. It formed in 1981.") == "Metallica"
    assert subject_of("The Danube was a trade route.") == "Danube"
    assert subject_of("it rained all day, and nobody came.") is None
    assert subject_of("A very long opening clause that runs on and on for many words is not a name.") is None


def test_links_are_whole_names_case_sensitive_longest_first_and_never_the_passage_itself() -> None:
    corpus = _corpus([
        ("ny", "New York is a state.", "New York"),
        ("nyc", "New York City is a city in New York.", "New York City"),
        ("a", "She moved to New York City, then to new york, then back to New York.", "Ann Lee"),
        ("b", "Ann Lee's brother visited Yorkshire.", "Bo Lee"),
        *[(f"f{i}", f"Filler {i}.", None) for i in range(3)],
    ])
    named = links(corpus)
    ids = [[corpus.ids[r] for r in found] for found in named]
    assert ids[0] == []  # its own name is no link
    assert ids[1] == ["ny"]  # "New York City" (its own) is skipped, "New York" links
    assert ids[2] == ["nyc", "ny"]  # the longest name at a place wins; "new york" in lower case is no name
    assert ids[3] == ["a"]  # a possessive names its subject; "Yorkshire" holds "York" but no whole name


def test_a_subject_the_corpus_also_writes_in_lower_case_is_a_common_word_and_links_nothing() -> None:
    corpus = _corpus([("empire", "An Empire is a large state.", "Empire"),
                      ("rome", "Rome was the centre of an Empire.", "Rome"),
                      *[(f"f{i}", f"an empire fell, story {i}.", None) for i in range(3)]])
    assert links(corpus)[1] == []


def test_a_name_nearly_every_passage_holds_links_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.training.data import synthetic

    corpus = _corpus([("hub", "Atlantis is an island.", "Atlantis"),
                      *[(f"p{i}", f"Town {i} lies on Atlantis.", f"Town {i}") for i in range(6)]])
    assert all(found == [0] for found in links(corpus)[1:])
    monkeypatch.setattr(synthetic, "MIN_COMMON_NAMED", 3)  # six passages name it, more than three may
    assert all(found == [] for found in links(corpus)[1:])


def test_fan_out_and_in_link_questions_hold_the_right_passages() -> None:
    corpus = band_corpus()
    questions = make_questions(corpus, seed=0)
    by_centre = {corpus.ids[q.supporting[0]]: q for q in questions if q.kind == "fan-out"}
    band = by_centre["Iron Lantern"]
    assert [corpus.ids[r] for r in band.supporting] == ["Iron Lantern", "Ada Stone", "Bram Holt"]
    # the kind asked for: the noun both musicians' definitions end on ("an English rock guitarist and singer born in
    # …": the last word before "and"), in the plural, with the word before it that both share
    assert band.question == "Which rock guitarists are connected to Iron Lantern?"
    # in-links: the guitarists that name a town, not the town; the question names the town they share
    in_links = {q.question.split()[-1].rstrip("?."): q for q in questions if q.kind == "in-links"}
    assert sorted(in_links) == ["Bay", "Ellis"]
    city = in_links["Ellis"]
    assert "Port Ellis" in city.question and "rock guitarists" in city.question
    assert [corpus.ids[r] for r in city.supporting] == ["Ada Stone", "Bram Holt", "Ezra Vale"]
    assert all(corpus.ids[q.supporting[0]] != "filler-0" for q in questions)  # no names, no questions
    assert len({q.question for q in questions}) == len(questions)


def test_in_link_questions_ask_for_one_kind_at_a_time_and_skip_passages_that_define_nothing() -> None:
    rows = [("Italy", "Italy is a country in Southern Europe.", "Italy"),
            *[(c, f"{c} is a small country that borders Italy.", c) for c in ("Austria", "Slovenia", "San Marino")],
            *[(t, f"{t} is a city in Italy with an old harbour.", t) for t in ("Genoa", "Naples")],
            ("Tiber Vale", "Tiber Vale, near Italy, has many old farms.", "Tiber Vale"),
            ("Ostia Moss", "Ostia Moss, near Italy, has many old farms.", "Ostia Moss"),
            *[(f"filler-{i}", f"Filler passage number {i} is about the weather.", None)
              for i in range(20)]]
    corpus = _corpus(rows)
    asked = {tuple(corpus.ids[r] for r in q.supporting): q.question for q in make_questions(corpus, seed=0)
             if q.kind == "in-links"}
    # the three countries, the two cities; the two passages that define nothing ("…, near Italy, has …") are in none
    assert sorted(asked) == [("Austria", "Slovenia", "San Marino"), ("Genoa", "Naples")]
    assert "countries" in asked[("Austria", "Slovenia", "San Marino")] and "Italy" in asked[("Genoa", "Naples")]
    assert "cities" in asked[("Genoa", "Naples")]


def test_an_in_link_group_larger_than_a_search_finds_is_asked_for_by_no_question(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.training.data import synthetic

    rows = [("Italy", "Italy is a country in Southern Europe.", "Italy"),
            *[(f"Town {c}", f"Town {c} is a city in Italy.", f"Town {c}") for c in "ABCD"],
            *[(f"filler-{i}", f"Filler passage number {i} is about the weather.", None)
              for i in range(20)]]
    corpus = _corpus(rows)
    assert [len(q.supporting) for q in make_questions(corpus, seed=0) if q.kind == "in-links"] == [4]
    monkeypatch.setattr(synthetic, "MAX_MEMBERS", 3)
    assert [q for q in make_questions(corpus, seed=0) if q.kind == "in-links"] == []


def test_a_group_of_two_kinds_is_asked_for_by_both_nouns_and_a_described_centre_by_its_definition(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.training.data import synthetic

    rows = [("Mara Quill", "Mara Quill is a Welsh poet of the sea, who wrote of Port Ellis and Iron Lantern.", "Mara Quill"),
            ("Port Ellis", "Port Ellis is a small coastal town in the north.", "Port Ellis"),
            ("Iron Lantern", "Iron Lantern was an English rock band from the north.", "Iron Lantern"),
            ("Kestrel Bay", "Kestrel Bay is a coastal town with a harbour.", "Kestrel Bay"),
            ("Salt Engine", "Salt Engine was a rock band.", "Salt Engine"),
            ("Tom Reed", "Tom Reed is a Welsh poet.", "Tom Reed")]
    rows += [(f"filler-{i}", f"Filler passage number {i} is about weather.", None) for i in range(20)]
    monkeypatch.setattr(synthetic, "DESCRIBED_SHARE", 1.0)
    corpus = _corpus(rows)
    (poet,) = [q for q in make_questions(corpus, seed=0) if corpus.ids[q.supporting[0]] == "Mara Quill"]
    assert [corpus.ids[r] for r in poet.supporting] == ["Mara Quill", "Port Ellis", "Iron Lantern"]
    # one town, one band: both nouns, as often as each other, in the order the passage names them, and no word before
    # them (the two differ); the centre by what its first sentence says it is, up to its first clause
    assert "towns and bands" in poet.question and "the Welsh poet of the sea" in poet.question
    assert "Mara" not in poet.question


def test_plurals_follow_the_rules_and_the_common_exceptions() -> None:
    assert [plural(n) for n in ("town", "city", "day", "church", "box", "class", "bus", "analysis", "species",
                                "person", "woman", "leaf")] == [
        "towns", "cities", "days", "churches", "boxes", "classes", "buses", "analyses", "species", "people", "women",
        "leaves"]
    # compounds of "man" and "woman" take theirs; nouns that only end in "man" do not
    assert [plural(n) for n in ("statesman", "businesswoman", "nobleman", "human", "shaman", "german")] == [
        "statesmen", "businesswomen", "noblemen", "humans", "shamans", "germans"]


def test_questions_are_the_same_for_a_seed_and_limited_on_request() -> None:
    corpus = band_corpus()
    first, again = make_questions(corpus, seed=3), make_questions(corpus, seed=3)
    assert first == again
    assert make_questions(corpus, seed=3, limit=2) == first[:2]


def test_a_corpus_too_small_says_how_many_passages_it_needs() -> None:
    corpus = _corpus([(f"p{i}", f"Passage {i}.", f"P {i}") for i in range(MIN_PASSAGES - 1)])
    with pytest.raises(SyntheticError, match=f"holds {MIN_PASSAGES - 1} passages.*at least {MIN_PASSAGES}"):
        make_questions(corpus)


def test_titles_come_from_a_passages_title_or_a_markdown_heading(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [{"id": "a", "title": "Ada", "text": "x."}, {"id": "b", "text": "y."}]))
    assert read_corpus(f).titles == ("Ada", None)
    f.write_text(json.dumps({"id": "a", "text": "x."}))
    assert read_corpus(f).titles is None
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Ada Stone\n\nShe plays.\n\n## Life\n\nBorn in Port Ellis.\n")
    (docs / "b.txt").write_text("Plain text.\n")
    corpus = read_corpus(docs)
    assert corpus.titles == ("Ada Stone", None)
