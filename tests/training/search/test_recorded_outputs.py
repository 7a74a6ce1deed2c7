"""Every shipped model and state anchor returns what it returned before its hops were brought to their compute floor
(`recorded_outputs.py`, `tests/fixtures/search_outputs.json`): the same ids in the same order, the same hops, and
Q-values and scores within 1e-5."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.training.search.recorded_outputs import CASES, FIXTURE, Case, outputs, searcher_of

TOLERANCE = 1e-5
FAST = "qrag/hotpotqa-minilm:saved"
"""The case the default suite runs, its adaptive and guarded greedy searches only (the shipped paragraph model as
served); the rest is marked slow."""


def recorded() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]  # type: ignore[no-any-return]


def assert_same(got: list[dict[str, Any]], want: list[dict[str, Any]], name: str) -> None:
    for g, w in zip(got, want, strict=True):
        assert g["overrides"] == w["overrides"]
        for qi, (g_hits, w_hits) in enumerate(zip(g["results"], w["results"], strict=True)):
            where = f"{name} {w['overrides']} question {qi}"
            assert [(h[0], h[1], h[4]) for h in g_hits] == [(h[0], h[1], h[4]) for h in w_hits], where
            for gh, wh in zip(g_hits, w_hits, strict=True):
                assert math.isclose(gh[2], wh[2], abs_tol=TOLERANCE), f"{where}: Q {gh[2]} vs {wh[2]}"
                assert math.isclose(gh[3], wh[3], abs_tol=TOLERANCE), f"{where}: score {gh[3]} vs {wh[3]}"


def test_the_paragraph_models_greedy_searches_equal_the_recorded_ones() -> None:
    case = next(c for c in CASES if c.name == FAST)
    searcher, questions = searcher_of(case)
    wanted = [0, 2]  # SEARCHES: adaptive, and k=5 with the guard
    assert_same(list(outputs(searcher, questions, wanted)), [recorded()[FAST][i] for i in wanted], FAST)


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_outputs_equal_the_recorded_ones(case: Case) -> None:
    searcher, questions = searcher_of(case)
    assert_same(list(outputs(searcher, questions)), recorded()[case.name], case.name)
