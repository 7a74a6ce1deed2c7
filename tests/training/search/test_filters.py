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
    # chunk 4's year is the string 'unknown': it cannot be ordered against a number, so it matches no order
    assert rows(Filter((Condition("year", op, value),))) == expected  # type: ignore[arg-type]


def test_one_chunks_value_that_cannot_be_ordered_is_left_out_and_fails_no_search(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    # A store leaves such a chunk out; so does the index: one tenant's odd value never fails another's search.
    assert rows(Filter.from_dict({"year": {"$gt": 2000}})) == [0, 2, 3]
    assert rows(Filter.from_dict({"year": {"$lt": "v"}})) == [4]  # strings order with strings
    assert rows(Filter.from_dict({"$or": [{"year": {"$gt": 2005}}, {"lang": "fr"}]})) == [2, 4]
    index = ChunkIndex.from_texts(tiny_qnet, ["alpha one", "beta two", "gamma three", "delta four", "epsilon five"],
                                  [f"c{i}" for i in range(5)], META)
    assert index.mask(Filter.from_dict({"year": {"$gte": 2001}})).nonzero().flatten().tolist() == [0, 2, 3]
    with pytest.raises(FilterError, match="the value must be a string, number or boolean"):
        Filter.coerce({"year": {"$gt": [2000]}})  # a malformed filter is still refused, when it is built


LISTS = [{"tags": ["a", "b"]}, {"tags": "a"}, {"tags": ["b"]}, {"tags": []}, {"tags": [1, 2.5]}, {"tags": [True]},
         {"tags": {"a": 1}}, {"tags": [["a"], {"a": 1}]}, {"tags": ("a", 3)}, {}]


@pytest.mark.parametrize(("spec", "expected"), [
    ({"tags": "a"}, [0, 1, 8]),  # a list matches when one of its items does
    ({"tags": {"$eq": "b"}}, [0, 2]),
    ({"tags": ["b", 2.5]}, [0, 2, 4]),
    ({"tags": 1}, [4]),  # never True
    ({"tags": True}, [5]),
    ({"tags": 3.0}, [8]),  # 3 and 3.0 are one number, in a list too
    ({"tags": {"$gt": 2}}, [4, 8]),  # an order: one of its items
    ({"tags": {"$lte": 1}}, [4]),
    ({"tags": {"$gt": "a"}}, [0, 2]),
    ({"tags": {"$ne": "a"}}, [2]),  # holds a string, and 'a' is none of them
    ({"tags": {"$ne": 2.5}}, [8]),
    ({"tags": {"$nin": ["b", 1]}}, [1, 8]),
    ({"tags": {"$nin": []}}, [0, 1, 2, 4, 5, 8]),  # holds a value: not [] nor a dict
    ({"tags.a": 1}, []),  # a dotted key is a key, not a path into the dict
])
def test_a_list_value_is_read_by_its_items_and_a_dict_is_no_value(spec: dict, expected: list[int]) -> None:  # type: ignore[type-arg]
    assert rows(Filter.from_dict(spec), LISTS) == expected


def test_a_dotted_key_is_the_whole_name_of_one_key() -> None:
    metas = [{"a.b": 1}, {"a": {"b": 1}}, {"a": 1, "b": 1}]
    assert rows(Filter.from_dict({"a.b": 1}), metas) == [0]
    assert rows(Filter.from_dict({"a.b": {"$gte": 1}}), metas) == [0]


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
    assert rows(Filter.from_dict({"lang": []})) == []  # `in []`: nothing


@pytest.mark.parametrize(("spec", "expected"), [
    ({"lang": {"$eq": "en"}}, [0, 2]), ({"lang": {"$ne": "en"}}, [1]), ({"lang": {"$in": ["de", "fr"]}}, [1]),
    ({"lang": {"$nin": ["de", "fr"]}}, [0, 2]), ({"year": {"$gt": 2001}}, [2, 3]), ({"year": {"$gte": 2001}}, [0, 2, 3]),
    ({"year": {"$lt": 2001}}, [1]), ({"year": {"$lte": 2001}}, [0, 1]),
    ({"year": {"$gte": 2000, "$lt": 2006}}, [0, 3]),  # several operators on a key: all of them
    ({"$and": [{"lang": "en"}, {"year": {"$gte": 2005}}]}, [2]),
    ({"$or": [{"lang": "de"}, {"year": {"$gte": 2005}}]}, [1, 2, 3]),
    ({"$or": [{"$and": [{"lang": "en"}, {"year": {"$gt": 2005}}]}, {"lang": "de"}], "year": {"$lt": 2006}}, [1]),
    ({"$and": []}, [0, 1, 2, 3]), ({"$or": []}, []),
])
def test_the_mongo_form_by_hand(spec: dict, expected: list[int]) -> None:  # type: ignore[type-arg]
    assert rows(Filter.from_dict(spec), META[:4]) == expected


def test_booleans_match_booleans_and_numbers_numbers() -> None:
    metas = [{"flag": True}, {"flag": 1}, {"flag": 1.0}, {"flag": False}, {"flag": 0}, {"flag": "True"}, {},
             {"flag": None}]
    assert rows(Filter.from_dict({"flag": True}), metas) == [0]  # never 1: stores hold typed JSON
    assert rows(Filter.from_dict({"flag": 1}), metas) == [1, 2]  # 1 and 1.0 are one number
    assert rows(Filter.from_dict({"flag": [False, 1]}), metas) == [1, 2, 3]
    assert rows(Filter.from_dict({"flag": {"$ne": True}}), metas) == [3]  # other booleans: not 0, '1' or no flag
    assert rows(Filter.from_dict({"flag": {"$ne": 0}}), metas) == [1, 2]  # other numbers
    assert rows(Filter.from_dict({"flag": {"$ne": "x"}}), metas) == [5]  # other strings
    assert rows(Filter.from_dict({"flag": {"$nin": [True, 0]}}), metas) == [1, 2, 3]  # of those kinds, none of them
    assert rows(Filter.from_dict({"flag": {"$nin": []}}), metas) == [0, 1, 2, 3, 4, 5]  # every chunk with a value
    assert rows(Filter.from_dict({"flag": {"$gte": 1}}), metas) == [1, 2]  # True is not a number: not ordered


def test_reduce_takes_out_what_lets_every_chunk_through_or_none() -> None:
    en = Condition("lang", "==", "en")
    assert Filter.from_dict({}).reduce() is True and Filter((), "or").reduce() is False
    assert Filter.from_dict({"lang": []}).reduce() is False
    assert Filter.from_dict({"flag": {"$nin": [True, False]}}).reduce() is False
    assert Filter.from_dict({"$or": [{"lang": []}, {"lang": "en"}]}).reduce() == Filter((en,), "or")
    assert Filter.from_dict({"$and": [{"lang": []}, {"lang": "en"}]}).reduce() is False
    assert Filter.from_dict({"$or": [{}, {"lang": "en"}]}).reduce() is True
    assert Filter((Filter((en,)), Filter((en, Condition("year", ">", 1)))), "and").reduce() == Filter(
        (en, Condition("year", ">", 1)), "and")  # nested ands: one, and the same key's equalities: one
    pred = Filter(predicate=lambda m: True)
    assert pred.reduce() is pred
    for f in (Filter.from_dict({"$or": [{"lang": []}, {"year": {"$gt": 2000}}]}), Filter.from_dict({"$and": [{}]})):
        reduced = f.reduce()
        assert all(f.matches(m) == (reduced if isinstance(reduced, bool) else reduced.matches(m))
                   for m in META[:4])


def test_a_predicate_and_its_answers() -> None:
    f = Filter.coerce(lambda m: m.get("year") == 1999)
    assert f is not None and rows(f) == [1] and f.key is None
    with pytest.raises(FilterError, match="must return True or False"):
        Filter.coerce(lambda m: m.get("year")).matches(META[0])  # type: ignore[union-attr]


def _recent(m: dict) -> bool:  # type: ignore[type-arg]
    return bool(m["year"] > 2000)


def test_a_predicate_that_raises_is_named_with_its_error_and_a_hint() -> None:
    with pytest.raises(FilterError, match=r"the filter function _recent raised KeyError: 'year' on a chunk whose "
                                          r"metadata is \{'lang': 'fr'\}.*read it with m.get\('year'\)") as caught:
        rows(Filter(predicate=_recent), [{"lang": "fr"}])
    assert isinstance(caught.value.__cause__, KeyError)
    with pytest.raises(FilterError, match=r"function \S*<lambda> raised TypeError: \S*<lambda>\(\) takes 0 positional "
                                          r"arguments.*takes one argument, the chunk's metadata dict") as caught:
        rows(Filter(predicate=lambda: True))  # type: ignore[arg-type, misc]
    assert isinstance(caught.value.__cause__, TypeError)
    with pytest.raises(FilterError, match=r"_recent raised TypeError: '>' not supported.*every chunk's metadata") as c:
        rows(Filter(predicate=_recent), [{"year": "unknown"}])
    assert isinstance(c.value.__cause__, TypeError)


@pytest.mark.parametrize(("spec", "message"), [
    (["lang", "en"], "a dict"), (42, "a dict"), ({"lang": {"$eq": ["en"]}}, r"'lang' ==: the value must be"),
    ({"year": [1, [2]]}, "a list of strings, numbers or booleans"), ({"x": float("nan")}, "the value must be"),
    ({"lang": {"$regex": "e"}}, r"unknown filter operator '\$regex' on key 'lang'; supported: \$eq, \$ne, \$gt, "
                                r"\$gte, \$lt, \$lte, \$in, \$nin"),
    ({"$not": [{"lang": "en"}]}, r"unknown filter operator '\$not'; a filter's keys are metadata keys or \$and, \$or"),
    ({"$and": {"lang": "en"}}, r"'\$and' takes a list of filters \(dicts\)"), ({"lang": {}}, "needs an operator"),
    ({"year": {"$in": 2000}}, "a list of strings"), ({"flag": {"$gt": True}}, "order numbers or strings, not booleans"),
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
    same = [Filter((Condition("lang", "in", ("en", "de")), Condition("year", "==", 3))),
            Filter.from_dict({"year": 3, "lang": ["de", "en"]}),  # keys and values in another order
            Filter.from_dict({"lang": {"$in": ["de", "en", "de"]}, "year": {"$eq": 3}}),  # the Mongo form
            Filter.from_dict({"$and": [{"year": 3}, {"lang": ["en", "de"]}]}),
            Filter((Filter((Condition("year", "==", 3),), "or"), Filter((Condition("lang", "in", ("de", "en")),))))]
    assert all(f.key == a.key for f in same)
    assert Filter.from_dict({"lang": ["en"]}).key == Filter.from_dict({"lang": "en"}).key  # one value: `==`
    assert Filter.from_dict({"lang": {"$nin": ["en"]}}).key == Filter.from_dict({"lang": {"$ne": "en"}}).key
    different = [Filter.from_dict({"lang": ["en", "de"], "year": 3.5}), Filter.from_dict({"lang": ["en"], "year": 3}),
                 Filter.from_dict({"$or": [{"lang": ["en", "de"]}, {"year": 3}]}),
                 Filter.from_dict({"lang": ["en", "de"], "year": True}), Filter.from_dict({"lang": ["en", "de"], "year": "3"}),
                 Filter.from_dict({"lang": {"$nin": ["en", "de"]}, "year": 3})]
    assert len({a.key, *(f.key for f in different)}) == len(different) + 1
    assert Filter.from_dict({}).key != Filter((), "or").key  # everything, nothing


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
