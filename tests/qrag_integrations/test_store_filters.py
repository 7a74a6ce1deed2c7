"""qrag's filters in the stores' own languages, by hand: Chroma `where`, Qdrant `Filter`, the plain dict, and
LlamaIndex `MetadataFilters` both ways."""

from __future__ import annotations

import pytest
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from qrag.integrations.llama_index_filters import from_metadata_filters, to_metadata_filters
from qrag.integrations.store_filters import chroma_where, qdrant_filter, store_filter
from qrag.training.search import Condition, Filter, FilterError

TEAM = Condition("team", "==", "legal")
YEARS = Condition("year", "in", (2024, 2025))
OLD = Condition("year", "<", 2000)


class Chroma:  # named as the store qrag recognises
    pass


class QdrantVectorStore:
    pass


class PGVector:
    pass


def test_chroma_where_by_hand() -> None:
    assert chroma_where(Filter((TEAM,))) == {"team": {"$eq": "legal"}}
    assert chroma_where(Filter((TEAM, YEARS))) == {"$and": [{"team": {"$eq": "legal"}}, {"year": {"$in": [2024, 2025]}}]}
    nested = Filter((Filter((TEAM, YEARS)), OLD), "or")
    assert chroma_where(nested) == {"$or": [{"$and": [{"team": {"$eq": "legal"}}, {"year": {"$in": [2024, 2025]}}]},
                                            {"year": {"$lt": 2000}}]}
    assert store_filter(Chroma(), Filter((OLD,))) == {"year": {"$lt": 2000}}


def test_qdrant_filter_by_hand() -> None:
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    f = qdrant_filter(Filter((TEAM, OLD)))
    assert f.must == [models.FieldCondition(key="metadata.team", match=models.MatchValue(value="legal")),
                      models.FieldCondition(key="metadata.year", range=models.Range(lt=2000))]
    ne = qdrant_filter(Filter((Condition("team", "!=", "legal"),)))
    has_key, not_legal = ne.must[0].must
    assert has_key.must_not[0].is_empty.key == "metadata.team"  # a chunk without the key does not match `!=`
    assert not_legal.must_not[0].match == models.MatchValue(value="legal")
    assert qdrant_filter(Filter((TEAM, YEARS), "or")).should is not None
    with pytest.raises(FilterError, match="Qdrant orders numbers only"):
        qdrant_filter(Filter((Condition("team", ">", "a"),)))


def test_other_stores_get_the_plain_dict_for_what_it_can_hold() -> None:
    assert store_filter(PGVector(), Filter((TEAM, YEARS))) == {"team": "legal", "year": [2024, 2025]}
    with pytest.raises(FilterError, match="qrag sends filters to PGVector as a dict"):
        store_filter(PGVector(), Filter((OLD,)))
    with pytest.raises(FilterError, match="Chroma filters in the database, which cannot run a Python function"):
        store_filter(Chroma(), Filter(predicate=lambda m: True))


def test_llama_index_filters_both_ways() -> None:
    mf = MetadataFilters(filters=[
        MetadataFilters(filters=[MetadataFilter(key="team", value="legal"),
                                 MetadataFilter(key="year", operator=FilterOperator.IN, value=[2024, 2025])]),
        MetadataFilter(key="year", operator=FilterOperator.LT, value=2000)], condition=FilterCondition.OR)
    f = from_metadata_filters(mf)
    assert f == Filter((Filter((TEAM, YEARS), "and"), OLD), "or")
    assert from_metadata_filters(to_metadata_filters(f)) == f  # type: ignore[arg-type]
    assert from_metadata_filters(None) is None
    with pytest.raises(FilterError, match="filters must be a llama_index MetadataFilters"):
        from_metadata_filters({"team": "legal"})  # type: ignore[arg-type]
