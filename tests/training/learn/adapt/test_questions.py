"""`qrag-adapt`'s questions: the built questions it holds out share no passage with those it trains on, the ones it
drops for sharing are counted, and a team's labelled ones repeat until they are their share of the episodes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from qrag.training.data.corpus import Corpus
from qrag.training.data.synthetic import make_questions
from qrag.training.learn.adapt.run import HELD_OUT, Adapt, labelled_repeats


def _wikipedia_like() -> Corpus:
    """Countries that name their neighbours around a ring, and cities that name their country: one component."""
    countries = [f"Country{i}" for i in range(30)]
    ids, texts = [], []
    for i, c in enumerate(countries):
        ids.append(c)
        texts.append(f"{c}: {c} is a country in Europe that borders {countries[i - 1]} and {countries[(i + 1) % 30]}.")
        for j in range(2):
            city = f"Town{i}x{j}"
            ids.append(city)
            texts.append(f"{city}: {city} is a city and the seat of a district of {c}.")
    return Corpus(tuple(ids), tuple(texts), "ring", None)


def test_held_out_built_questions_share_no_passage_with_training_ones(tmp_path: Path) -> None:
    corpus = _wikipedia_like()
    adapt = Adapt.__new__(Adapt)
    adapt.options = SimpleNamespace(seed=0)  # type: ignore[assignment]
    adapt.corpus, adapt.labelled, adapt.start_horizon = corpus, [], 2
    adapt.synthetic = make_questions(corpus, seed=0)
    adapt.folder = SimpleNamespace(work=tmp_path)  # type: ignore[assignment]
    adapt.record = SimpleNamespace(facts={})  # type: ignore[assignment]
    adapt._questions()
    facts = adapt.record.facts
    built = len(adapt.synthetic)
    assert built > 60
    assert facts["held_out_questions"] == min(HELD_OUT[1], round(HELD_OUT[0] * built))
    assert facts["dropped_overlapping"] > 0  # one component: the questions across the held-out clusters' edges
    assert facts["train_questions"] + facts["held_out_questions"] + facts["dropped_overlapping"] == built
    rows = {name: [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
            for name in ("train", "val")}
    assert len(rows["train"]) == facts["train_questions"] and len(rows["val"]) == facts["held_out_questions"]
    passages = {name: {p for r in lines for p in r["supporting"]} for name, lines in rows.items()}
    assert not passages["train"] & passages["val"]
    assert len({r["id"] for lines in rows.values() for r in lines}) == len(rows["train"]) + len(rows["val"])


@pytest.mark.parametrize(("labelled", "built", "repeats"), [
    (49, 3783, 78),  # ceil(0.5 * 3783 / (0.5 * 49)) = ceil(77.2): 3 822 labelled episodes beside 3 783 built
    (10, 90, 9),     # exactly half
    (10, 91, 10),    # 9 would leave them 90 of 181
    (60, 40, 1),     # already more than half
    (0, 100, 1),     # none to repeat
    (5, 0, 1),       # labelled alone
])
def test_labelled_questions_repeat_until_they_are_half_the_runs_own_episodes(labelled: int, built: int,
                                                                             repeats: int) -> None:
    assert labelled_repeats(labelled, built, 0.5) == repeats
    if repeats > 1:  # the fewest that reach the share
        assert labelled * repeats >= built > labelled * (repeats - 1)


def test_a_smaller_share_repeats_less() -> None:
    assert labelled_repeats(10, 90, 0.25) == 3  # ceil(0.25 * 90 / (0.75 * 10)) = 3: 30 of 120
