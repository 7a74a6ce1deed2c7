"""Questions built from a corpus alone: subjects, the links between passages, and the fan-out and in-link questions
made from them, checked by hand on a small corpus whose links are known."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from qrag.training.data.corpus import Corpus, read_corpus
from qrag.training.data.synthetic import (
    MIN_PASSAGES,
    SyntheticError,
    SyntheticQuestion,
    file_title,
    find_names,
    links,
    make_questions,
    noun_lemmas,
    plural,
    singular,
    split_held_out,
    subject_of,
    subjects,
    title_prefix,
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
    assert all(found == [0] for found in links(corpus, hubs=True)[1:])  # the wiki source weighs hubs itself


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


def test_plurals_are_inflects_with_its_known_mistakes_fixed() -> None:
    nouns = ["monarch", "city", "analysis", "statesman", "species", "person", "church", "German", "german", "shaman",
             "town", "day", "box", "bus", "woman", "leaf", "thief", "nobleman", "patriarch", "epoch", "physics", "arch",
             "search", "human", "singer-songwriter", "phylum", "subphylum"]
    assert [plural(n) for n in nouns] == [
        "monarchs", "cities", "analyses", "statesmen", "species", "people", "churches", "Germans", "germans", "shamans",
        "towns", "days", "boxes", "buses", "women", "leaves", "thieves", "noblemen", "patriarchs", "epochs", "physics",
        "arches", "searches", "humans", "singer-songwriters", "phyla", "subphyla"]


def test_a_plural_stays_plural_and_the_lexicon_says_which_words_are_nouns() -> None:
    assert [plural(n) for n in ["traditions", "organisms", "goddesses", "physics", "media"]] == [
        "traditions", "organisms", "goddesses", "physics", "media"]
    assert [singular(n) for n in ["organisms", "traditions", "physics", "media", "city", "Germans"]] == [
        "organism", "tradition", "physics", "media", "city", "Germans"]
    # known as no noun; an unknown word by its last hyphenated part, else by an adjective's ending; else unknown
    assert noun_lemmas("southernmost") == () and noun_lemmas("political") == () and noun_lemmas("united") == ()
    assert noun_lemmas("traditions") == ("tradition",) and noun_lemmas("country") == ("country",)
    assert noun_lemmas("third-largest") == () and noun_lemmas("sub-regions") == ("sub-region",)
    assert noun_lemmas("ethnolinguistic") == () and noun_lemmas("eukaryote") is None


def _hub_corpus(centre: str, spokes: dict[str, str]) -> Corpus:
    """A passage `centre` that names every spoke, the spokes (name → the rest of its first sentence) and 20 fillers."""
    rows = [(centre, f"{centre} is a story that tells of {' and '.join(spokes)}.", centre)]
    rows += [(name, f"{name} {rest}", name) for name, rest in spokes.items()]
    rows += [(f"filler-{i}", f"Filler passage number {i} is about the weather.", None) for i in range(20)]
    return _corpus(rows)


def test_a_kind_is_the_noun_after_the_adjectives_a_definition_coordinates() -> None:
    # "southernmost" is the last word before "and", but no noun: the head is the noun the adjectives qualify
    corpus = _hub_corpus("Rail Saga", {"Antarctica Prime": "is Earth's southernmost and least-populated continent.",
                                       "Boreal Mass": "is Earth's coldest and least-visited continent."})
    (question,) = [q.question for q in make_questions(corpus, seed=0) if q.kind == "fan-out"]
    assert "continents" in question and "southernmost" not in question and "coldest" not in question


def test_a_kind_defined_in_the_plural_is_asked_for_in_the_plural_once() -> None:
    corpus = _hub_corpus("Old Saga", {"Vaishnava Way": "is one of the major Hindu traditions of India.",
                                      "Shaiva Way": "is one of the oldest Hindu traditions of India."})
    (question,) = [q.question for q in make_questions(corpus, seed=0) if q.kind == "fan-out"]
    assert "Hindu traditions" in question and "traditionss" not in question


def test_passages_that_define_nothing_are_asked_for_by_the_nouns_they_share() -> None:
    corpus = _hub_corpus("Farm Saga", {"Tiber Vale": ", near the coast, has many old farms and quiet villages.",
                                       "Ostia Moss": ", near the coast, keeps many old farms and quiet villages."})
    (question,) = [q.question for q in make_questions(corpus, seed=0) if q.kind == "fan-out"]
    # the nouns both first sentences hold, in their order; not the adjectives ("old", "quiet": nouns too, rarely)
    assert "coast farms villages" in question


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


# ---------------------------------------------------------------- subjects of passages without a title field

def test_a_title_the_text_opens_with_is_its_subject() -> None:
    # FanOutQA's Wikipedia summaries written "Title: text", and the custom corpus form "Title. text"
    assert subject_of("Metallica: Metallica is an American heavy metal band formed in Los Angeles.") == "Metallica"
    assert subject_of("Long jump: The long jump is a track and field event.") == "Long jump"
    assert subject_of("Lars Ulrich. Lars Ulrich is a Danish drummer and a co-founder of Metallica.") == "Lars Ulrich"
    assert subject_of("Paris. It is the capital and largest city of France.") == "Paris"
    assert subject_of("Mercury (planet): Mercury is the first planet from the Sun.") == "Mercury"
    assert subject_of("Doping in sport: In competitive sports, doping is the use of banned drugs.") == "Doping in sport"
    assert subject_of("Charles I of England: Charles I was King of England from 1625.") == "Charles I of England"
    assert subject_of("John A. Macdonald: Sir John Alexander Macdonald was a prime minister.") == "John A. Macdonald"
    assert subject_of('Like a Rolling Stone: "Like a Rolling Stone" is a song by Bob Dylan.') == "Like a Rolling Stone"
    assert subject_of("2001: A Space Odyssey: 2001: A Space Odyssey is a 1968 film.") == "2001: A Space Odyssey"
    assert title_prefix("Metallica: Metallica is a band.") == ("Metallica", "Metallica is a band.")


def test_an_ordinary_first_sentence_is_no_title() -> None:
    for text in ("Born in Warsaw. She moved to Paris in 1891 to study.",  # a preposition: no title before ". "
                 "It rained. Nobody came to the fair.",  # a pronoun
                 "Paris is the capital of France. It lies on the Seine.",  # a verb
                 "John F. Kennedy was an American politician. He served as president.",  # cut at an initial
                 "St. Louis is a city in Missouri. It lies on the Mississippi.",  # cut at an abbreviation
                 "Note: this line goes on in lower case.",  # no sentence after it
                 "Metallica is an American heavy metal band. It formed in 1981."):
        assert title_prefix(text) is None, text
    assert subject_of("Metallica is an American heavy metal band. It formed in 1981.") == "Metallica"
    assert subject_of("John F. Kennedy was an American politician.") is None  # nor a defined phrase holding a "."


def test_a_title_the_text_opens_with_comes_after_the_title_field_and_before_the_file_name() -> None:
    assert subject_of("Lars Ulrich: Lars Ulrich is a drummer.", "Ulrich (drummer)") == "Ulrich"
    assert subject_of("Lars Ulrich: Lars Ulrich is a drummer.", None, "Marie Curie") == "Lars Ulrich"
    assert subject_of("She was a physicist and chemist.", None, "Marie Curie") == "Marie Curie"
    assert subject_of("Pierre Curie was a physicist.", None, None) == "Pierre Curie"


def test_a_file_name_is_a_subject_only_as_its_text_writes_it_as_a_name() -> None:
    assert file_title("people/marie_curie.txt", "In 1903 Marie Curie shared the Nobel Prize.") == "Marie Curie"
    assert file_title("Marie Curie.txt", "In 1903 Marie Curie shared the Nobel Prize.") == "Marie Curie"
    assert file_title("jean-paul_sartre.txt", "Jean-Paul Sartre wrote Nausea.") == "Jean-Paul Sartre"
    assert file_title("marie_curie.txt", "a note on marie curie, in lower case only.") is None
    assert file_title("notes.txt", "Notes. These notes are about the Curies.") is None  # one word, at a sentence start
    assert file_title("doc_001.txt", "This is doc 001 of the archive.") is None
    assert file_title("2024_05_01.txt", "Minutes of 2024 05 01.") is None  # no letter
    assert file_title("metallica.txt", "A band. Fans of Metallica came.") == "Metallica"  # one word, inside a sentence


def test_a_folder_files_name_is_its_passages_subject_and_its_text_stays_as_it_is(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    files = {"marie_curie.txt": "She was a physicist and chemist born in Warsaw.\n\nIn 1903 Marie Curie shared the "
                                "Nobel Prize in Physics with Pierre Curie.\n",
             "Pierre Curie.txt": "Pierre Curie was a French physicist who married Marie Curie.\n",
             "notes.txt": "Both Pierre Curie and Marie Curie worked in Paris. Notes on their lab follow.\n",
             "doc_001.txt": "A list of the laboratory's instruments.\n"}
    for name, text in files.items():
        (docs / name).write_text(text)
    corpus = read_corpus(docs)
    assert corpus.ids == ("Pierre Curie.txt#0", "doc_001.txt#0", "marie_curie.txt#0", "notes.txt#0")
    assert corpus.texts == ("Pierre Curie was a French physicist who married Marie Curie.",
                            "A list of the laboratory's instruments.",
                            "She was a physicist and chemist born in Warsaw. In 1903 Marie Curie shared the Nobel Prize "
                            "in Physics with Pierre Curie.",
                            "Both Pierre Curie and Marie Curie worked in Paris. Notes on their lab follow.")  # no title
    assert corpus.titles is None
    assert subjects(corpus) == ["Pierre Curie", None, "Marie Curie", None]
    named = links(corpus)
    assert [[corpus.ids[r] for r in found] for found in named] == [
        ["marie_curie.txt#0"], [], ["Pierre Curie.txt#0"], ["Pierre Curie.txt#0", "marie_curie.txt#0"]]


def test_questions_from_title_prefixed_texts_are_those_from_title_fields() -> None:
    """FanOutQA-like passages with their titles in the text only: the same subjects, links, kinds and questions."""
    titled = band_corpus()
    assert titled.titles is not None
    for mark in (":", "."):
        plain = Corpus(titled.ids, tuple(f"{title}{mark} {text.removeprefix(f'{title}. ')}" if title else text
                                         for text, title in zip(titled.texts, titled.titles, strict=True)),
                       "plain", None)
        assert subjects(plain) == subjects(titled)
        assert links(plain) == links(titled)
        built = make_questions(plain, seed=0)
        assert built == make_questions(titled, seed=0)
        # the in-link questions ask for the passages' kind, read from the sentence after the title
        assert any(q.kind == "in-links" and "rock guitarists" in q.question for q in built)


# ---------------------------------------------------------------- ambiguous names

def test_a_name_inside_a_longer_capitalised_name_links_nothing() -> None:
    names = {("West", "Africa"): 1, ("Beatles",): 2, ("Charlemagne",): 3, ("Metallica",): 4}

    def found(text: str) -> list[int]:
        return list(find_names(text, names, 2))

    assert found("Namibia, formerly South West Africa, is a country in southern Africa.") == []
    assert found("The West Africa Command was formed in 1941.") == []
    assert found("Ghana is a country in West Africa. It borders Togo.") == [1]
    assert found("Trade grew. Later West Africa became rich.") == [1]  # "Later" starts a sentence
    assert found("West Africa (the region) lies south of the Sahara.") == [1]  # a bracket ends the name
    assert found("The Beatles' Abbey Road and the Beatles were named.") == [2, 2]  # an article, a possessive
    assert found("In 800 Pope Leo crowned King Charlemagne emperor.") == [3]  # an honorific
    assert found("Metallica's James Hetfield sang; fans of Metallica, Megadeth and Slayer came.") == [4, 4]


def test_a_name_that_is_the_subject_of_two_documents_links_nothing() -> None:
    corpus = _corpus([
        ("mercury-planet", "Mercury is the first planet from the Sun.", "Mercury (planet)"),
        ("mercury-element", "Mercury is a chemical element.", "Mercury (element)"),
        ("venus-0", "Venus is the second planet from the Sun.", "Venus"),
        ("venus-1", "Venus has a thick atmosphere, unlike Mercury.", "Venus"),  # one document: the same title
        ("sky", "At dawn Mercury and Venus can both be seen.", "Dawn sky"),
        *[(f"f{i}", f"Filler {i}.", None) for i in range(3)],
    ])
    ids = [[corpus.ids[r] for r in found] for found in links(corpus)]
    assert ids[4] == ["venus-0"]  # "Mercury" names two documents: nothing; Venus's first passage
    assert ids[3] == []  # nothing of its own document; Mercury is ambiguous
    folder = Corpus(("a/venus.md#0", "a/venus.md#1", "b/mercury.md#0", "c/mercury.md#0", "sky.txt#0"),
                    ("Venus. Venus is a planet.", "Venus. Its day is longer than its year.",
                     "Mercury. Mercury is a planet.", "Mercury. Mercury is a metal.",
                     "At dawn Mercury and Venus can both be seen."), "folder",
                    ("Venus", "Venus", "Mercury", "Mercury", None))
    assert [[folder.ids[r] for r in found] for found in links(folder)] == [[], [], [], [], ["a/venus.md#0"]]


# ---------------------------------------------------------------- held-out questions

def _question(*rows: int) -> SyntheticQuestion:
    return SyntheticQuestion(f"q{rows}", rows, "fan-out")


def _check_split(questions: list[SyntheticQuestion], share: float, cap: int, seed: int) -> tuple[int, int]:
    split = split_held_out(questions, share=share, cap=cap, seed=seed)
    held = {r for q in split.held_out for r in q.supporting}
    assert not held & {r for q in split.train for r in q.supporting}  # no passage in both
    assert all(not held.isdisjoint(q.supporting) for q in split.dropped)  # dropped: each touches a held-out passage
    assert sorted(map(id, split.train + split.held_out + split.dropped)) == sorted(map(id, questions))  # a partition
    assert split == split_held_out(questions, share=share, cap=cap, seed=seed)  # the same for a seed
    return len(split.held_out), len(split.dropped)


def _giant_component(seed: int = 0) -> list[SyntheticQuestion]:
    """A Wikipedia-like question set: 400 fan-outs over 300 passages, most passages in several, one component."""
    rng = random.Random(seed)
    return [_question(*rng.sample(range(300), rng.randint(2, 4))) for _ in range(400)]


def test_held_out_questions_share_no_passage_with_training_ones_in_a_giant_component() -> None:
    questions = _giant_component()
    for seed in range(5):
        held, dropped = _check_split(questions, 0.1, 120, seed)
        assert held == 40 and dropped > 0  # the questions across the held-out clusters' edges
    assert _check_split(questions, 0.5, 7, 0)[0] == 7  # the cap
    splits = {tuple(q.question for q in split_held_out(questions, share=0.1, cap=120, seed=s).held_out)
              for s in range(3)}
    assert len(splits) == 3  # another seed, other held-out questions


def test_held_out_questions_of_many_small_components_are_whole_components() -> None:
    singles = [_question(2 * i, 2 * i + 1) for i in range(50)]
    for seed in range(5):
        assert _check_split(singles, 0.1, 120, seed) == (5, 0)
    pairs = [q for i in range(30) for q in (_question(3 * i, 3 * i + 1), _question(3 * i + 1, 3 * i + 2))]
    for seed in range(5):
        held, dropped = _check_split(pairs, 0.1, 120, seed)
        assert held == 6 and dropped <= 1  # whole pairs, but for a last cluster that needs one question of a pair


def test_built_questions_split_without_a_shared_passage() -> None:
    questions = make_questions(band_corpus(), seed=0)
    _check_split(questions, 0.3, 120, 0)
    assert split_held_out(questions, share=0, cap=120).held_out == []
    with pytest.raises(ValueError, match="share in"):
        split_held_out(questions, share=1.5, cap=10)
