"""One meaning for a filter wherever it runs: a table of filters and the chunks each lets through, computed by hand,
asserted in-process (`Filter.matches`, `ChunkIndex`) and through real stores (Chroma in memory, Qdrant in memory via
langchain-qdrant, LangChain's FAISS, LlamaIndex's Chroma store); a store that cannot hold a filter as qrag means it
refuses it by name before it is asked. Then the translations by hand: Chroma `where`, Qdrant `Filter`, the plain
dict, LlamaIndex `MetadataFilters` both ways."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import torch
from langchain_core.embeddings import Embeddings
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from qrag.integrations import store_filters
from qrag.integrations.langchain_embeddings import LangChainChunkStore
from qrag.integrations.llama_index_filters import from_metadata_filters, to_metadata_filters
from qrag.integrations.store_filters import chroma_where, qdrant_filter, store_filter
from qrag.training.search import Condition, Filter, FilterError
from qrag.training.search.index import ChunkIndex

pytestmark = pytest.mark.filterwarnings("ignore:legacy embedding function config:DeprecationWarning",
                                        "ignore:`langchain-community` is being sunset:DeprecationWarning")

# Chunks c0..c8: numbers (ints and floats), strings, booleans, and chunks that lack each key.
META: list[dict[str, Any]] = [
    {"year": 1999, "team": "legal", "flag": True},  # c0
    {"year": 2005, "team": "sales", "flag": False},  # c1
    {"year": 2010.5, "team": "legal"},  # c2: no flag
    {"year": 2020, "flag": 1},  # c3: no team; a flag that is a number
    {"team": "ops", "flag": True},  # c4: no year
    {"year": 2005.0, "team": "", "flag": 0},  # c5: the year as a float; an empty team
    {"other": "x"},  # c6: none of the keys
    {"year": 1, "team": "1"},  # c7: a team that is a string of a digit
    {"team": 5, "year": 2010},  # c8: a team that is a number
]
IDS = [f"c{i}" for i in range(len(META))]
ALL = list(range(len(META)))
PRESENCE = "presence"  # refused by Chroma and LlamaIndex: their `$ne` / `NIN` take chunks without the key
BOOL = "boolean"  # refused by LlamaIndex: its MetadataFilter holds no booleans
LISTS = "lists"  # refused by Chroma over a store holding lists under the key: its orders and negations miss them
REFUSAL = {PRESENCE: r"counts a (chunk|node) that lacks '\w+' as a match of '(!=|nin)'",
           BOOL: "MetadataFilter holds strings and numbers, no booleans", LISTS: "holds list values under 'tags'"}

# (filter, the chunks it lets through by hand, why a store refuses it)
TABLE: list[tuple[dict[str, Any], list[int], str | None]] = [
    ({"year": 2005}, [1, 5], None),  # 2005 and 2005.0 are one number
    ({"year": {"$eq": 2005.0}}, [1, 5], None),
    ({"year": {"$ne": 2005}}, [0, 2, 3, 7, 8], None),  # c4 and c6 lack the key: not matches
    ({"year": {"$gt": 2005}}, [2, 3, 8], None),
    ({"year": {"$gte": 2005}}, [1, 2, 3, 5, 8], None),
    ({"year": {"$lt": 2005}}, [0, 7], None),
    ({"year": {"$lte": 2005}}, [0, 1, 5, 7], None),
    ({"year": {"$gte": 2000, "$lt": 2011}}, [1, 2, 5, 8], None),  # two operators on a key: both
    ({"year": 2010.5}, [2], None),  # Chroma alone would match the integer 2010 too
    ({"year": {"$lt": 2010.5}}, [0, 1, 5, 7, 8], None),  # and miss 2010 here
    ({"year": {"$gt": 2009.5}}, [2, 3, 8], None),
    ({"year": {"$ne": 2010.5}}, [0, 1, 3, 5, 7, 8], None),
    ({"year": [1999, 2020]}, [0, 3], None),
    ({"year": {"$in": [1999, 2010.5]}}, [0, 2], None),  # ints and floats in one list
    ({"year": {"$nin": [1999, 2005]}}, [2, 3, 7, 8], None),
    ({"team": "legal"}, [0, 2], None),
    ({"team": ["ops", "sales"]}, [1, 4], None),
    ({"team": ""}, [5], None),
    ({"team": "1"}, [7], None),
    ({"team": {"$in": [5, "ops"]}}, [4, 8], None),  # a number and a string in one list
    ({"flag": True}, [0, 4], BOOL),  # never the number 1
    ({"flag": False}, [1], BOOL),  # never the number 0
    ({"flag": 1}, [3], None),  # never True
    ({"flag": {"$ne": True}}, [1], BOOL),  # booleans other than True: not 1, 0 or a missing flag
    ({"flag": {"$ne": 0}}, [3], None),  # numbers other than 0
    ({"flag": {"$nin": [True]}}, [1], BOOL),
    ({"flag": {"$in": [True, 0]}}, [0, 4, 5], BOOL),
    ({"$or": [{"team": "legal"}, {"year": {"$gt": 2015}}]}, [0, 2, 3], None),
    ({"$and": [{"team": "legal"}, {"year": {"$gt": 2000}}]}, [2], None),
    ({"$or": [{"year": {"$ne": 2005}}, {"flag": 1}]}, [0, 2, 3, 7, 8], None),
    ({"nobody": "x"}, [], None),
    ({"nobody": {"$ne": 1}}, [], None),  # `!=` on a key no chunk has: nothing
    ({}, ALL, None),  # no condition: no filter
    ({"$and": []}, ALL, None),
    ({"team": []}, [], None),  # `in []`: nothing, without asking the store
    ({"$or": []}, [], None),
    ({"$or": [{"team": []}, {"year": 1}]}, [7], None),
    ({"$and": [{"team": []}, {"year": 1}]}, [], None),
    ({"team": {"$ne": "legal"}}, [1, 4, 5, 7], PRESENCE),  # strings other than 'legal': not the number 5
    ({"team": {"$nin": ["legal", "sales"]}}, [4, 5, 7], PRESENCE),
    ({"year": {"$nin": []}}, [0, 1, 2, 3, 5, 7, 8], PRESENCE),  # an empty `nin`: every chunk that has the key
]
REFUSED_BY = {"chroma": {PRESENCE}, "qdrant": set(), "llama-chroma": {PRESENCE, BOOL}, "faiss": set()}
CASES = [pytest.param(spec, expected, reason, id=str(spec)) for spec, expected, reason in TABLE]


class Vectors(Embeddings):
    """Fixed positive 4-d vectors (no model: the filter, not the ranking, is under test)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]

    @staticmethod
    def vector(text: str) -> list[float]:
        i = int(text.split()[-1]) if text.split()[-1].isdigit() else 0
        return [1.0, 0.1 * (i % 7), 0.05 * (i % 3), 0.01 * i]


TEXTS = [f"chunk {i}" for i in range(len(META))]
QUERY = torch.tensor([[1.0, 0.0, 0.0, 0.0]])  # (1, D)
IP = {"hnsw": {"space": "ip"}}


def _chroma_client() -> Any:
    chromadb = pytest.importorskip("chromadb")
    return chromadb.EphemeralClient()


class Stores(dict[str, Any]):
    """Each backend as a `ChunkStore` over the nine chunks, built on first use (a missing optional package skips)."""

    def __missing__(self, name: str) -> Any:
        self[name] = BUILD[name]()
        return self[name]


@pytest.fixture(scope="module")
def stores() -> Stores:
    return Stores()


def _chroma() -> LangChainChunkStore:
    pytest.importorskip("langchain_chroma")
    from langchain_chroma import Chroma

    store = Chroma(f"qrag-filters-{uuid.uuid4().hex[:8]}", Vectors(), client=_chroma_client(),
                   collection_configuration=IP)  # type: ignore[arg-type]
    store.add_texts(TEXTS, metadatas=META, ids=IDS)
    return LangChainChunkStore(store)


def _qdrant() -> LangChainChunkStore:
    pytest.importorskip("langchain_qdrant")
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client.http.models import Distance

    store = QdrantVectorStore.from_texts(
        TEXTS, Vectors(), metadatas=[{**m, "cid": i} for m, i in zip(META, IDS, strict=True)],
        ids=[str(uuid.uuid5(uuid.NAMESPACE_URL, i)) for i in IDS], location=":memory:",
        collection_name="qrag-filters", distance=Distance.DOT)
    return LangChainChunkStore(store, id_key="cid")


def _faiss() -> LangChainChunkStore:
    pytest.importorskip("faiss")
    vectorstores = pytest.importorskip("langchain_community.vectorstores")
    from langchain_community.vectorstores.utils import DistanceStrategy

    store = vectorstores.FAISS.from_texts(TEXTS, Vectors(), metadatas=META, ids=IDS,
                                          distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)
    return LangChainChunkStore(store)


def _llama_chroma() -> Any:
    pytest.importorskip("llama_index.vector_stores.chroma")
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from qrag.integrations.llama_index_store import LlamaIndexChunkStore

    collection = _chroma_client().create_collection(f"qrag-li-filters-{uuid.uuid4().hex[:8]}", configuration=IP)
    store = ChromaVectorStore(chroma_collection=collection)
    store.add([TextNode(text=t, id_=i, metadata=m, embedding=Vectors.vector(t))
               for t, i, m in zip(TEXTS, IDS, META, strict=True)])
    return LlamaIndexChunkStore(store)


BUILD = {"chroma": _chroma, "qdrant": _qdrant, "llama-chroma": _llama_chroma, "faiss": _faiss}


def _ids(expected: list[int]) -> list[str]:
    return [IDS[i] for i in expected]


# ---------------------------------------------------------------------- the table, everywhere
@pytest.mark.parametrize(("spec", "expected", "reason"), CASES)
def test_in_process(spec: dict[str, Any], expected: list[int], reason: str | None) -> None:
    f = Filter.coerce(spec)
    assert f is not None
    assert [i for i, m in enumerate(META) if f.matches(m)] == expected
    index = ChunkIndex(torch.tensor([Vectors.vector(t) for t in TEXTS]), TEXTS, IDS, META)  # (N, 4)
    assert index.mask(f).nonzero().flatten().tolist() == expected
    assert sorted(c.id for c, _ in index.search(QUERY, k=len(META), where=f)[0]) == _ids(expected)


# Chroma's translation differs most from the in-process meaning: its rows run in the default suite; the other stores'
# rows (the bulk of the suite's filter cases) run with `-m slow`, as CI does.
@pytest.mark.parametrize("backend", [b if b == "chroma" else pytest.param(b, marks=pytest.mark.slow) for b in BUILD])
@pytest.mark.parametrize(("spec", "expected", "reason"), CASES)
def test_in_a_store(backend: str, spec: dict[str, Any], expected: list[int], reason: str | None,
                    stores: Stores) -> None:
    store = stores[backend]
    where = Filter.coerce(spec)
    if reason in REFUSED_BY[backend]:
        with pytest.raises(FilterError, match=REFUSAL[reason]):  # FilterError: refused before the store is asked
            store.search(QUERY, k=len(META), where=where)
        return
    hits = store.search(QUERY, k=len(META), where=where)[0]
    assert sorted(c.id for c, _ in hits) == _ids(expected)


# ---------------------------------------------------------------------- numbers at a fractional bound, in real Chroma
# Integers and floats on both sides of each bound and at it (Chroma cuts a float operand toward zero against integer
# metadata and compares floats exactly), a string and a boolean that no order takes, and a chunk without the key.
NUMBERS: list[Any] = [-3, -2, -2.0, -1.5, -1, -1.0, -0.5, 0, 0.0, 0.5, 1, 2009, 2009.5, 2010, 2010.0, 2010.5, 2010.7,
                      2011, 2011.0, 2012, "2010", True]
NUMBER_META: list[dict[str, Any]] = [{"x": v} for v in NUMBERS] + [{"y": 1}]
BOUNDS = [2010.5, -1.5, -0.5, 0.5, 2010.7, 2010, 2010.0, 0]
NUMBER_FILTERS = [{"x": {op: b}} for b in BOUNDS for op in ("$lt", "$lte", "$gt", "$gte", "$eq", "$ne")] + [
    {"x": {"$in": [2010.5, -1.5, 1]}}, {"x": {"$nin": [2010.5, -1.5, 0]}}, {"x": {"$gte": -1.5, "$lte": 2010.5}}]


@pytest.fixture(scope="module")
def number_collection() -> Any:
    collection = _chroma_client().create_collection(f"qrag-numbers-{uuid.uuid4().hex[:8]}", configuration=IP)
    collection.add(ids=[f"n{i}" for i in range(len(NUMBER_META))], metadatas=NUMBER_META,  # type: ignore[arg-type]
                   embeddings=[[1.0, 0.1 * i] for i in range(len(NUMBER_META))])
    return collection


@pytest.mark.parametrize("spec", NUMBER_FILTERS, ids=str)
def test_chroma_keeps_every_number_the_index_keeps(spec: dict[str, Any], number_collection: Any) -> None:
    where = Filter.coerce(spec)
    assert where is not None
    kept = sorted(f"n{i}" for i, m in enumerate(NUMBER_META) if where.matches(m))
    reduced = where.reduce()
    assert isinstance(reduced, Filter)
    assert sorted(number_collection.get(where=chroma_where(reduced))["ids"]) == kept
    # LlamaIndex's Chroma store gets Chroma's translation, through its own MetadataFilters
    pytest.importorskip("llama_index.vector_stores.chroma")
    from llama_index.core.vector_stores.types import VectorStoreQuery
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from qrag.integrations.llama_index_filters import metadata_filters_for

    store = ChromaVectorStore(chroma_collection=number_collection)
    got = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0], similarity_top_k=len(NUMBER_META),
                                       filters=metadata_filters_for(store)(reduced)))
    assert sorted(got.ids or []) == kept


# ---------------------------------------------------------------------- list values and dotted keys, in every store
# A list value is read by its items (as Qdrant reads an array payload). Chroma holds lists of one type, non-empty.
LIST_META: list[dict[str, Any]] = [
    {"tags": ["a", "b"]}, {"tags": "a"}, {"tags": ["b"]}, {"tags": [1, 2]}, {"tags": [2.5, 3.0]}, {"tags": [True]},
    {"other": 1}, {"tags": 3}, {"a.b": 1, "a": 5}]
LIST_IDS = [f"l{i}" for i in range(len(LIST_META))]
# (filter, the chunks it lets through by hand, what Chroma lets through where it differs; LISTS: refused, as its orders
# and negations cannot look inside the lists this store holds under the key)
LIST_TABLE: list[tuple[dict[str, Any], list[int], list[int] | str | None]] = [
    ({"tags": "a"}, [0, 1], None),  # one item is enough
    ({"tags": ["b", 3]}, [0, 2, 4, 7], None),  # 3 and 3.0 are one number, in a list too
    ({"tags": 1}, [3], None),  # never True
    ({"tags": True}, [5], None),
    ({"tags": {"$eq": 2.5}}, [4], None),
    ({"tags": {"$in": [2.5, "b"]}}, [0, 2, 4], None),
    ({"tags": {"$gt": 2}}, [4, 7], LISTS),  # an order: one of its items (Chroma's would miss the lists)
    ({"tags": {"$lte": 1}}, [3], LISTS),
    ({"tags": {"$ne": 2}}, [4, 7], LISTS),  # holds a number, and none is 2
    ({"tags": {"$ne": True}}, [], LISTS),
    ({"tags": {"$nin": [1, 2.5]}}, [7], LISTS),
    ({"tags": {"$ne": "a"}}, [2], LISTS),  # holds a string, and none is 'a'
    ({"tags": {"$nin": []}}, [0, 1, 2, 3, 4, 5, 7], LISTS),
    ({"a.b": 1}, [8], None),  # a dotted key is one key
    ({"a.b": {"$gte": 1}}, [8], None),
]
LIST_CASES = [pytest.param(spec, expected, chroma, id=str(spec)) for spec, expected, chroma in LIST_TABLE]


def _list_chroma() -> LangChainChunkStore:
    pytest.importorskip("langchain_chroma")
    from langchain_chroma import Chroma

    store = Chroma(f"qrag-lists-{uuid.uuid4().hex[:8]}", Vectors(), client=_chroma_client(),
                   collection_configuration=IP)  # type: ignore[arg-type]
    store.add_texts([f"chunk {i}" for i in range(len(LIST_META))], metadatas=LIST_META, ids=LIST_IDS)
    return LangChainChunkStore(store)


def _list_qdrant() -> LangChainChunkStore:
    pytest.importorskip("langchain_qdrant")
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client.http.models import Distance

    # Qdrant holds what Chroma refuses too: a nested object under `a` whose path `a.b` is not the key `a.b`
    metas = [{**m, "cid": i} for m, i in zip(LIST_META, LIST_IDS, strict=True)]
    metas[6] = {**metas[6], "a": {"b": 1}}
    store = QdrantVectorStore.from_texts(
        [f"chunk {i}" for i in range(len(LIST_META))], Vectors(), metadatas=metas,
        ids=[str(uuid.uuid5(uuid.NAMESPACE_URL, i)) for i in LIST_IDS], location=":memory:",
        collection_name="qrag-lists", distance=Distance.DOT)
    return LangChainChunkStore(store, id_key="cid")


@pytest.fixture(scope="module")
def list_stores() -> dict[str, LangChainChunkStore]:
    return {"chroma": _list_chroma(), "qdrant": _list_qdrant()}


@pytest.mark.parametrize(("spec", "expected", "chroma"), LIST_CASES)
def test_a_list_value_and_a_dotted_key_mean_one_thing_in_process_and_in_qdrant(
        spec: dict[str, Any], expected: list[int], chroma: list[int] | str | None,
        list_stores: dict[str, LangChainChunkStore]) -> None:
    where = Filter.coerce(spec)
    assert where is not None
    assert [i for i, m in enumerate(LIST_META) if where.matches(m)] == expected
    index = ChunkIndex(torch.tensor([Vectors.vector(f"chunk {i}") for i in range(len(LIST_META))]),  # (N, 4)
                       [f"chunk {i}" for i in range(len(LIST_META))], LIST_IDS, LIST_META)
    assert index.mask(where).nonzero().flatten().tolist() == expected
    hits = list_stores["qdrant"].search(QUERY, k=len(LIST_META), where=where)[0]
    assert sorted(c.id for c, _ in hits) == [LIST_IDS[i] for i in expected]
    if chroma in (PRESENCE, LISTS):
        with pytest.raises(FilterError, match=REFUSAL[chroma]):
            list_stores["chroma"].search(QUERY, k=len(LIST_META), where=where)
        return
    hits = list_stores["chroma"].search(QUERY, k=len(LIST_META), where=where)[0]
    assert sorted(c.id for c, _ in hits) == [LIST_IDS[i] for i in (expected if chroma is None else chroma)]


def test_a_subclass_of_chroma_gets_chromas_translation_end_to_end() -> None:
    pytest.importorskip("langchain_chroma")
    from langchain_chroma import Chroma

    class MyChroma(Chroma):
        pass

    store = MyChroma(f"qrag-sub-{uuid.uuid4().hex[:8]}", Vectors(), client=_chroma_client(),
                     collection_configuration=IP)  # type: ignore[arg-type]
    store.add_texts(TEXTS, metadatas=META, ids=IDS)
    where = Filter.coerce({"year": {"$gte": 2005, "$lte": 2010.5}, "team": {"$in": ["legal", "sales", 5]}})
    assert where is not None and isinstance(where.reduce(), Filter)
    assert store_filter(store, where) == chroma_where(where.reduce())  # type: ignore[arg-type]
    hits = LangChainChunkStore(store).search(QUERY, k=len(META), where=where)[0]
    assert sorted(c.id for c, _ in hits) == ["c1", "c2", "c8"]


def test_llama_index_stores_get_their_own_translation() -> None:
    pytest.importorskip("llama_index.vector_stores.chroma")
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from qrag.integrations.llama_index_filters import metadata_filters_for

    class MyChromaVectorStore(ChromaVectorStore):
        pass

    half = Filter.coerce({"year": {"$lte": 2010.5}})
    assert half is not None
    plain = metadata_filters_for(object())(half)  # any other store: LlamaIndex's MetadataFilters as they read
    assert [(f.key, f.operator, f.value) for f in plain.filters] == [  # type: ignore[union-attr]
        ("year", FilterOperator.LTE, 2010.5)]
    collection = _chroma_client().create_collection(f"qrag-li-sub-{uuid.uuid4().hex[:8]}", configuration=IP)
    chroma = metadata_filters_for(MyChromaVectorStore(chroma_collection=collection))(half)
    assert chroma.condition == FilterCondition.OR and len(chroma.filters) == 2  # Chroma's: by the integer bounds
    with pytest.raises(FilterError, match="Chroma orders numbers only"):
        metadata_filters_for(MyChromaVectorStore(chroma_collection=collection))(
            Filter.from_dict({"team": {"$gt": "a"}}))
    assert metadata_filters_for(object())(Filter.from_dict({"team": {"$gt": "a"}})).filters[0].value == "a"  # type: ignore[union-attr]


# ---------------------------------------------------------------------- FAISS: exact filtered search
def test_faiss_filters_every_stored_vector_not_its_first_twenty() -> None:
    pytest.importorskip("faiss")
    vectorstores = pytest.importorskip("langchain_community.vectorstores")
    from langchain_community.vectorstores.utils import DistanceStrategy

    texts = [f"chunk {i}" for i in range(60)]
    metas = [{"team": "legal" if i % 20 == 19 else "sales", "n": i} for i in range(60)]
    store = vectorstores.FAISS.from_texts(texts, Vectors(), metadatas=metas, ids=[f"c{i}" for i in range(60)],
                                          distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)
    # the query ranks chunk i by -0.01 i: two of the three 'legal' chunks fall outside the 20 that LangChain's
    # default fetch_k filters
    query = [0.0, 0.0, 0.0, -1.0]
    plain = store.similarity_search_with_score_by_vector(query, k=10, filter={"team": "legal"})
    hits = LangChainChunkStore(store).search(torch.tensor([query]), k=10, where=Filter.coerce({"team": "legal"}))[0]
    assert sorted(c.id for c, _ in hits) == ["c19", "c39", "c59"]
    assert [d.id for d, _ in plain] == ["c19"]  # what the fix is for
    # FAISS filters in the process: qrag's own rules, so functions too
    hits = LangChainChunkStore(store).search(QUERY, k=3, where=Filter.coerce(lambda m: m["n"] in (5, 58)))[0]
    assert sorted(c.id for c, _ in hits) == ["c5", "c58"]


# ---------------------------------------------------------------------- refusals name the store and the way out
def test_chroma_refuses_what_it_would_answer_otherwise_by_name(stores: Stores) -> None:
    store = stores["chroma"]
    with pytest.raises(FilterError, match=r"Chroma counts a chunk that lacks 'team' as a match of '!=' \(\$ne\).*"
                                          r"name the values you want with '==' / 'in'"):
        store.search(QUERY, k=3, where=Filter.coerce({"team": {"$ne": "legal"}}))
    with pytest.raises(FilterError, match=r"Chroma orders numbers only: filter 'team' > 'a' needs a number"):
        store.search(QUERY, k=3, where=Filter.coerce({"team": {"$gt": "a"}}))
    with pytest.raises(FilterError, match="Chroma filters in the database, which cannot run a Python function"):
        store.search(QUERY, k=3, where=Filter.coerce(lambda m: True))


def test_llama_index_refuses_booleans_and_string_negations_by_name(stores: Stores) -> None:
    store = stores["llama-chroma"]
    with pytest.raises(FilterError, match=r"ChromaVectorStore counts a node that lacks 'team' as a match of 'nin'"):
        store.search(QUERY, k=3, where=Filter.coerce({"team": {"$nin": ["legal"]}}))
    with pytest.raises(FilterError, match=r"MetadataFilter holds strings and numbers, no booleans: filter 'flag' =="):
        store.search(QUERY, k=3, where=Filter.coerce({"flag": True}))
    with pytest.raises(FilterError, match=r"Chroma orders numbers only"):
        store.search(QUERY, k=3, where=Filter.coerce({"team": {"$lt": "m"}}))


def test_a_chunk_whose_value_cannot_be_ordered_is_left_out_in_process_as_in_a_store(stores: Stores) -> None:
    where = Filter.coerce({"flag": {"$gt": 0}})  # c0 and c4 hold True, which is not a number
    assert where is not None
    assert [i for i, m in enumerate(META) if where.matches(m)] == [3]
    for backend in ("chroma", "qdrant"):
        assert [c.id for c, _ in stores[backend].search(QUERY, k=9, where=where)[0]] == ["c3"]


@pytest.mark.parametrize("backend", list(BUILD))
def test_the_combined_floor_and_call_filter_goes_to_a_store(backend: str, stores: Stores) -> None:
    """A retriever's construction-time filter and a call's are joined as `Filter((floor, call), "and")`."""
    floor, call = Filter.coerce({"team": ["legal", "sales"]}), Filter.coerce({"year": {"$ne": 2005}})
    assert floor is not None and call is not None
    hits = stores[backend].search(QUERY, k=9, where=Filter((floor, call), "and"))[0]
    assert sorted(c.id for c, _ in hits) == ["c0", "c2"]


# ---------------------------------------------------------------------- the translations by hand
TEAM = Condition("team", "==", "legal")
YEARS = Condition("year", "in", (2024, 2025))
OLD = Condition("year", "<", 2000)


class Chroma:  # named as the store, and not it: qrag tells stores by isinstance, never by name
    pass


class PGVector:
    pass


def _eq(key: str, value: Any) -> dict[str, Any]:
    """Chroma's `key == value`: a scalar equal to it, or a list value holding it (`$contains` is typed)."""
    return {"$or": [{key: {"$eq": value}}, {key: {"$contains": value}}]}


def test_chroma_where_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # The translation for a Chroma that stores list values (chromadb 1.5; `$contains` is sent only when the installed
    # Chroma takes it, and an environment without chromadb has none to ask).
    monkeypatch.setattr(store_filters, "_chroma_holds_lists", lambda: True)
    assert chroma_where(Filter((TEAM,))) == _eq("team", "legal")
    years = {"$or": [{"year": {"$in": [2024, 2025]}}, {"year": {"$contains": 2024}}, {"year": {"$contains": 2024.0}},
                     {"year": {"$contains": 2025}}, {"year": {"$contains": 2025.0}}]}
    assert chroma_where(Filter((TEAM, YEARS))) == {"$and": [_eq("team", "legal"), years]}
    nested = Filter((Filter((TEAM, YEARS)), OLD), "or")
    assert chroma_where(nested) == {"$or": [{"$and": [_eq("team", "legal"), years]}, {"year": {"$lt": 2000}}]}
    # `!=` a number: below or above it (Chroma's $ne would take chunks without the key); a boolean: the other one
    assert chroma_where(Filter((Condition("year", "!=", 2005),))) == {"$or": [{"year": {"$lt": 2005}},
                                                                              {"year": {"$gt": 2005}}]}
    assert chroma_where(Filter((Condition("year", "nin", (1, 2)),))) == {"$and": [
        {"$or": [{"year": {"$lt": 1}}, {"year": {"$gt": 1}}]}, {"$or": [{"year": {"$lt": 2}}, {"year": {"$gt": 2}}]}]}
    assert chroma_where(Filter((Condition("flag", "!=", True),))) == {"flag": {"$eq": False}}
    # lists of one Python type each (Chroma refuses [1, 2.0]); a number matches 1 and 1.0 alike there; a fraction
    # is decided between its integer bounds (Chroma cuts it toward zero against integer metadata)
    assert chroma_where(Filter((Condition("year", "in", (1, 2.0, True, 2.5)),))) == {"$or": [
        {"year": {"$in": [1]}}, {"year": {"$in": [True]}}, {"year": {"$in": [2.0]}},
        {"$and": [{"year": {"$gt": 2}}, {"year": {"$lt": 3}}, {"year": {"$eq": 2.5}}]},
        {"year": {"$contains": 1}}, {"year": {"$contains": 1.0}}, {"year": {"$contains": 2}},
        {"year": {"$contains": 2.0}}, {"year": {"$contains": True}}, {"year": {"$contains": 2.5}}]}
    # x <= -1.5: every integer up to -2, and -1.5 itself (the faulty `< -1.5 or <= -2` lost a float -1.5)
    assert chroma_where(Filter((Condition("year", "<=", -1.5),))) == {"$or": [
        {"year": {"$lte": -2}}, {"$and": [{"year": {"$gt": -2}}, {"year": {"$lt": -1}}, {"year": {"$lte": -1.5}}]}]}
    assert chroma_where(Filter((Condition("year", ">", 2009.5),))) == {"$or": [
        {"year": {"$gte": 2010}}, {"$and": [{"year": {"$gt": 2009}}, {"year": {"$lt": 2010}}, {"year": {"$gt": 2009.5}}]}]}


def test_each_store_gets_its_translator_by_isinstance_never_by_name(stores: Stores) -> None:
    chroma = stores["chroma"].store
    assert store_filter(chroma, Filter((OLD,))) == {"year": {"$lt": 2000}}
    assert store_filter(chroma, Filter.from_dict({})) is None  # `{}` is no filter, `in []` nothing: neither is sent
    with pytest.raises(FilterError, match="lets no chunk through"):
        store_filter(chroma, Filter.from_dict({"team": []}))
    with pytest.raises(FilterError, match="Chroma filters in the database, which cannot run a Python function"):
        store_filter(chroma, Filter(predicate=lambda m: True))
    # a class that is named Chroma and is not one gets the plain dict, as any other store
    assert store_filter(Chroma(), Filter((TEAM,))) == {"team": "legal"}
    with pytest.raises(FilterError, match="qrag sends filters to Chroma as a dict"):
        store_filter(Chroma(), Filter((OLD,)))


def test_qdrant_filter_by_hand() -> None:
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    def field(key: str, **kw: Any) -> Any:
        return models.FieldCondition(key=f"metadata.{key}", **kw)

    f = qdrant_filter(Filter((TEAM, OLD)))
    assert f.must == [field("team", match=models.MatchValue(value="legal")), field("year", range=models.Range(lt=2000))]
    # a number is the range [v, v] (Qdrant's exact match tells 1 from 1.0 and takes no float); a boolean its value
    assert qdrant_filter(Filter((Condition("score", "==", 0.5),))).must == [
        field("score", range=models.Range(gte=0.5, lte=0.5))]
    assert qdrant_filter(Filter((Condition("flag", "==", True),))).must == [
        field("flag", match=models.MatchValue(value=True))]
    # `!=`: holds a value of the kind, and none equal to it (a list: none of its items)
    ne = qdrant_filter(Filter((Condition("year", "!=", 2005),))).must[0]
    assert ne.should == [models.Filter(should=[field("year", range=models.Range(lt=0)),
                                               field("year", range=models.Range(gte=0))])]
    assert ne.must_not == [field("year", range=models.Range(gte=2005, lte=2005))]
    ne = qdrant_filter(Filter((Condition("team", "!=", "legal"),))).must[0]
    has_key = ne.should[0].must[0]
    assert has_key.must_not[0].is_empty.key == "metadata.team"  # a chunk without the key does not match `!=`
    assert ne.must_not == [field("team", match=models.MatchValue(value="legal"))]
    assert qdrant_filter(Filter((TEAM, YEARS), "or")).should is not None
    with pytest.raises(FilterError, match="Qdrant orders numbers only"):
        qdrant_filter(Filter((Condition("team", ">", "a"),)))
    # a key is one key: a dot (or any character a path reads) is quoted, never a path into a nested object
    assert qdrant_filter(Filter((Condition("a.b", "==", "x"),))).must == [
        models.FieldCondition(key='metadata."a.b"', match=models.MatchValue(value="x"))]
    assert qdrant_filter(Filter((Condition("my key[0]", "==", "x"),))).must[0].key == 'metadata."my key[0]"'
    with pytest.raises(FilterError, match=r"cannot quote one holding '\"': rename the metadata key 'a\"b'"):
        qdrant_filter(Filter((Condition('a"b', "==", "x"),)))


def test_other_stores_get_the_plain_dict_for_what_it_can_hold() -> None:
    assert store_filter(PGVector(), Filter((TEAM, YEARS))) == {"team": "legal", "year": [2024, 2025]}
    assert store_filter(PGVector(), Filter.from_dict({"$and": [{"team": "legal"}, {"year": {"$in": [2024, 2025]}}]})
                        ) == {"team": "legal", "year": [2024, 2025]}
    with pytest.raises(FilterError, match="qrag sends filters to PGVector as a dict"):
        store_filter(PGVector(), Filter((OLD,)))
    with pytest.raises(FilterError, match="PGVector filters in the database, which cannot run a Python function"):
        store_filter(PGVector(), Filter(predicate=lambda m: True))


def test_a_floor_on_a_key_is_never_lost_where_a_call_filters_the_same_key() -> None:
    # A plain dict holds one value per key: the floor's and the call's values are intersected before it is built,
    # so a call cannot widen (or replace) a tenant floor on any store.
    floor = Filter.from_dict({"tenant": ["a", "b"]})
    assert store_filter(PGVector(), Filter((floor, Filter.from_dict({"tenant": "b", "year": 1})))) == {
        "tenant": "b", "year": 1}
    assert Filter((floor, Filter.from_dict({"tenant": "c"}))).reduce() is False  # nothing is common: nothing matches
    with pytest.raises(FilterError, match="lets no chunk through"):
        store_filter(PGVector(), Filter((floor, Filter.from_dict({"tenant": "c"}))))
    assert store_filter(PGVector(), Filter((Filter.from_dict({"n": [1, 2]}), Filter.from_dict({"n": 1.0})))) == {"n": 1}
    metas = [{"tenant": t, "n": i} for i, t in enumerate("abcab")]
    for call in ({"tenant": "c"}, {"tenant": "b"}, {"tenant": ["b", "c"]}, {}):
        both = Filter((floor, Filter.from_dict(call)))
        reduced = both.reduce()
        assert [both.matches(m) for m in metas] == [
            reduced if isinstance(reduced, bool) else reduced.matches(m) for m in metas]  # reducing changes nothing


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
    # `!=` a number goes as below-or-above (the stores' NE takes nodes without the key): the same chunks
    ne = Filter((Condition("year", "!=", 2005),))
    back = from_metadata_filters(to_metadata_filters(ne))
    assert back is not None and back.key != ne.key
    assert [m for m in META if back.matches(m)] == [m for m in META if ne.matches(m)]
    sent = to_metadata_filters(ne)
    assert sent.condition == FilterCondition.OR and [(f.key, f.operator, f.value) for f in sent.filters] == [
        ("year", FilterOperator.LT, 2005), ("year", FilterOperator.GT, 2005)]  # type: ignore[union-attr]
