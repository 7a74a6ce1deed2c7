"""Metadata filters by hand: every operator, joins, missing keys, bad input; the mask of an index and its cache."""

from __future__ import annotations

import pytest
import torch

from qrag.training.search.filters import Condition, Filter, FilterError
from qrag.training.search.index import ChunkIndex

META = [{"lang": "en", "year": 2001, "tags": "a"}, {"lang": "de", "year": 1999}, {"lang": "en", "year": 2010},
        {"year": 2005}, {"lang": "fr", "year": "unknown"}]


def rows(f: Filter, metas: list[dict] = META) -> list[int]:  # type: ignore[type-arg]
    return [i for i, m in enumerate(metas) if f.matches(m)]


@pytest.mark.parametrize(("op", "value", "expected"), [
    ("==", "en", [0, 2]), ("!=", "en", [1, 4]),  # chunk 3 has no "lang": it matches neither
    ("in", ["de", "fr"], [1, 4]), ("nin", ["de", "fr"], [0, 2]),
])
def test_each_equality_operator_by_hand(op: str, value: object, expected: list[int]) -> None:
    assert rows(Filter((Condition("lang", op, value),))) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("op", "value", "expected"), [
    (">", 2001, [2, 3]), (">=", 2001, [0, 2, 3]), ("<", 2001, [1]), ("<=", 2001, [0, 1]),
])
def test_each_order_operator_by_hand(op: str, value: int, expected: list[int]) -> None:
    metas = META[:4]  # chunk 4's year is a string: see the next test
    assert rows(Filter((Condition("year", op, value),)), metas) == expected  # type: ignore[arg-type]


def test_ordering_values_that_cannot_be_ordered_names_the_key_and_values() -> None:
    with pytest.raises(FilterError, match=r"'year' > 2000: a chunk's 'year' is 'unknown'"):
        rows(Filter((Condition("year", ">", 2000),)))


def test_and_or_and_nesting() -> None:
    en, recent = Condition("lang", "==", "en"), Condition("year", ">=", 2005)
    old_de = Filter((Condition("lang", "==", "de"), Condition("year", "<", 2000)), "and")
    assert rows(Filter((en, recent), "and"), META[:4]) == [2]
    assert rows(Filter((en, recent), "or"), META[:4]) == [0, 2, 3]
    assert rows(Filter((Filter((en, recent), "and"), old_de), "or"), META[:4]) == [1, 2]


def test_the_dict_form_is_equality_and_a_list_means_any_of_its_items() -> None:
    assert rows(Filter.from_dict({"lang": "en", "year": 2010})) == [2]
    assert rows(Filter.from_dict({"lang": ["de", "fr"]})) == [1, 4]
    assert rows(Filter.from_dict({"nobody": "has it"})) == []  # a key no chunk has: nothing, not an error
    assert rows(Filter.from_dict({})) == [0, 1, 2, 3, 4]  # no condition: everything


def test_a_predicate_and_its_answers() -> None:
    f = Filter.coerce(lambda m: m.get("year") == 1999)
    assert f is not None and rows(f) == [1] and f.key is None
    with pytest.raises(FilterError, match="must return True or False"):
        Filter.coerce(lambda m: m.get("year")).matches(META[0])  # type: ignore[union-attr]


@pytest.mark.parametrize(("spec", "message"), [
    (["lang", "en"], "a dict"), (42, "a dict"), ({"lang": {"$eq": "en"}}, r"'lang' ==: the value must be"),
    ({"year": [1, [2]]}, "a list of strings, numbers or booleans"), ({"x": float("nan")}, "the value must be"),
])
def test_malformed_filters_are_refused_by_name(spec: object, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        Filter.coerce(spec)  # type: ignore[arg-type]


def test_unsupported_operators_and_joins_are_refused() -> None:
    with pytest.raises(FilterError, match="unsupported filter operator 'contains' on key 'lang'"):
        Condition("lang", "contains", "e")  # type: ignore[arg-type]
    with pytest.raises(FilterError, match="'and' or 'or'"):
        Filter((), "xor")  # type: ignore[arg-type]


def test_the_canonical_key_names_the_same_conditions_alike() -> None:
    a = Filter.from_dict({"lang": ["en", "de"], "year": 3})
    b = Filter((Condition("lang", "in", ("en", "de")), Condition("year", "==", 3)))
    assert a.key == b.key and a.key != Filter.from_dict({"lang": ["de", "en"], "year": 3}).key


def test_an_index_mask_is_cached_until_the_index_changes(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    texts = ["alpha one", "beta two", "gamma three", "delta four", "epsilon five"]
    index = ChunkIndex.from_texts(tiny_qnet, texts, [f"c{i}" for i in range(5)], META)
    f = Filter.from_dict({"lang": "en"})
    mask = index.mask(f)
    assert mask.tolist() == [True, False, True, False, False] and mask.dtype == torch.bool
    assert index.mask(Filter.from_dict({"lang": "en"})) is mask  # the same conditions: the cached mask
    index.add(tiny_qnet, ["zeta six"], ["c5"], [{"lang": "en"}])
    assert index.mask(f).tolist() == [True, False, True, False, False, True]
    index.delete(["c0"])
    assert index.mask(f).tolist() == [False, True, False, False, True]
