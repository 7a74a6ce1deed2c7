"""The conventions vector-store users type by habit, kept by both adapters: a construction filter is a floor,
`delete` takes LangChain's arguments and never reads None or a lone string loosely, every backend (the in-process
index, Chroma, Qdrant, LlamaIndex's Chroma store) refuses an existing id on add and an unknown id on delete, and bad
arguments or metadata are refused before anything is embedded."""

from __future__ import annotations

import datetime
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import Document as LlamaDocument
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from qrag.integrations import QRAGEmbeddings, QRAGLlamaIndexRetriever, QRAGRetriever
from qrag.integrations.langchain_stores import store_size, stored_ids
from qrag.training.input_checks import check_metadatas
from qrag.training.model.qnet import QNetwork
from qrag.training.search.searcher import MultiHopSearcher

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # offline: no usage reports from the Chroma client
pytestmark = pytest.mark.filterwarnings("ignore:legacy embedding function config:DeprecationWarning")


def ns(docs: list[Document]) -> set[int]:
    return {d.metadata["n"] for d in docs}


@pytest.fixture()
def no_embedding(adapter_qnet: QNetwork, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any chunk embedding fail loudly: what is refused must be refused before it."""
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("embedded before the input was checked")

    monkeypatch.setattr(adapter_qnet, "embed_chunks", boom)


# ------------------------------------------------------------------ 1. the construction filter is a floor
FLOOR = {"n": [0, 1, 2, 3, 4, 5]}


async def test_a_construction_filter_holds_on_every_call_path(tiny_searcher: MultiHopSearcher, questions: list[str]) -> None:
    r = QRAGRetriever(searcher=tiny_searcher, k=6, filter=FLOOR)
    q = questions[0]
    assert ns(r.invoke(q)) == ns(r.invoke(q, filter=None)) == set(range(6))  # None: no extra filter, not "none"
    assert ns(r.invoke(q, filter={"n": [4, 5, 6, 7]})) == {4, 5}              # narrows: both must allow
    assert ns(r.invoke(q, filter=lambda m: m["n"] % 2 == 0)) == {0, 2, 4}
    assert r.invoke(q, filter={"n": [8, 9]}) == []                            # outside the floor: nothing
    assert [ns(d) for d in r.batch(questions[:2], filter={"n": [4, 5, 6, 7]})] == [{4, 5}, {4, 5}]
    assert [ns(d) for d in r.batch(questions[:2], filter=None)] == [set(range(6))] * 2
    assert ns(await r.ainvoke(q, filter=None)) == set(range(6))
    assert ns(await r.ainvoke(q, filter={"n": [5, 6]})) == {5}
    assert [ns(d) for d in await r.abatch(questions[:2], filter={"n": [0, 11]})] == [{0}, {0}]
    assert ns(QRAGRetriever(searcher=tiny_searcher, k=6).invoke(q, filter={"n": [6, 7]})) == {6, 7}  # no floor


# ------------------------------------------------------------------ 2. delete's arguments, add's return
def test_delete_takes_langchain_s_arguments_and_refuses_none_and_a_lone_string(adapter_qnet: QNetwork, texts: list[str]) -> None:
    ids = [str(i) for i in range(13)]  # '1' and '2' exist: delete("12") read as characters would remove them
    r = QRAGRetriever.from_texts([*texts, "One more."], adapter_qnet, ids=ids, k=2)
    with pytest.raises(ValueError, match=r"got the single string '12'.*pass \['12'\]"):
        r.delete("12")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="got None; qrag never reads None as 'every document'"):
        r.delete()
    with pytest.raises(ValueError, match=r"takes only ids, got \['where'\]"):
        r.delete(["3"], where={"n": 3})
    assert r.searcher.index is not None and r.searcher.index.ids == ids  # nothing was deleted
    assert r.delete(["12"]) is True and r.delete(ids=["1", "2"]) is True
    assert r.searcher.index.ids == [i for i in ids if i not in ("1", "2", "12")]
    docs = [Document(page_content="A fact.", id="a"), Document(page_content="Another fact.")]
    added = r.add_documents(docs)
    assert added[0] == "a" and len(added) == 2 and r.searcher.index.ids[-2:] == added
    assert r.add_documents([Document(page_content="Third.", id="x")], ids=["y"]) == ["y"]  # explicit ids win
    assert r.add_texts(["Fourth."], ids=["z"]) == ["z"]


def test_llama_index_delete_nodes_refuses_a_lone_string_and_takes_delete_from_docstore(adapter_qnet: QNetwork,
                                                                                        texts: list[str]) -> None:
    nodes = [TextNode(text=t, id_=str(i)) for i, t in enumerate([*texts, "One more."])]
    r = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=adapter_qnet)
    with pytest.raises(ValueError, match=r"got the single string '12'.*pass \['12'\]"):
        r.delete_nodes("12")  # type: ignore[arg-type]
    assert r.searcher.index is not None and len(r.searcher.index) == 13 and set(r._nodes) == {n.node_id for n in nodes}
    r.delete_nodes(["12"], delete_from_docstore=True)
    assert "12" not in r._nodes and len(r.searcher.index) == 12 and "1" in r._nodes and "2" in r._nodes


# ------------------------------------------------------------------ 3. one rule on every backend
def _chroma(qnet: QNetwork, texts: list[str], ids: list[str], metas: list[dict[str, Any]]) -> Any:
    chromadb = pytest.importorskip("chromadb")
    from langchain_chroma import Chroma

    store = Chroma(f"lc-{uuid.uuid4().hex[:12]}", QRAGEmbeddings(qnet), client=chromadb.EphemeralClient(),
                   collection_configuration={"hnsw": {"space": "ip"}})  # type: ignore[arg-type]
    store.add_texts(texts, ids=ids, metadatas=metas)
    return store


def _qdrant(qnet: QNetwork, texts: list[str], ids: list[str], metas: list[dict[str, Any]]) -> Any:
    pytest.importorskip("qdrant_client")
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client.http.models import Distance

    return QdrantVectorStore.from_texts(texts, QRAGEmbeddings(qnet), ids=ids, metadatas=metas, location=":memory:",
                                        collection_name="conventions", distance=Distance.DOT)


@pytest.mark.parametrize("make", [_chroma, _qdrant], ids=["chroma", "qdrant"])
def test_a_store_refuses_an_existing_id_and_an_unknown_one_like_the_index(make: Any, adapter_qnet: QNetwork,
                                                                         texts: list[str], questions: list[str]) -> None:
    ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"c{i}")) for i in range(4)]  # Qdrant takes UUIDs
    store = make(adapter_qnet, texts[:4], ids, [{"qrag_position": i} for i in range(4)])
    r = QRAGRetriever.from_vector_store(store, adapter_qnet, k=2)
    kind = type(store).__name__
    with pytest.raises(ValueError, match=rf"ids \['{ids[1]}'\] are already in this {kind} store.*Nothing was added"):
        r.add_texts(["An overwrite.", "A new one."], ids=[ids[1], str(uuid.uuid4())])
    assert store_size(store) == 4 and [d.page_content for d in store.get_by_ids([ids[1]])] == [texts[1]]
    unknown = str(uuid.uuid4())
    with pytest.raises(ValueError, match=rf"ids \['{unknown}'\] are not in this {kind} store; nothing was deleted"):
        r.delete([ids[0], unknown])
    with pytest.raises(ValueError, match=r"ids \['12'\] are not in"):  # Qdrant would take a non-UUID silently
        r.delete(["12"])
    with pytest.raises(ValueError, match=f"cannot delete every document of this {kind} store"):
        r.delete(ids)
    assert store_size(store) == 4 and stored_ids(store, ids) == set(ids)
    new = r.add_texts(["Mary moved to the cellar."], [{"qrag_position": 4}])
    assert len(new) == 1 and stored_ids(store, new) == set(new) and store_size(store) == 5
    assert r.delete([ids[0], *new]) is True and store_size(store) == 3
    assert len(r.invoke(questions[0])) == 2


def test_id_lookups_on_langchain_s_in_memory_store(adapter_qnet: QNetwork) -> None:
    store = InMemoryVectorStore(QRAGEmbeddings(adapter_qnet))
    store.add_texts(["a", "b"], ids=["0", "1"])
    assert stored_ids(store, ["0", "1", "12"]) == {"0", "1"} and store_size(store) == 2


def test_a_store_that_cannot_look_ids_up_is_named(adapter_qnet: QNetwork) -> None:
    class NoLookup(InMemoryVectorStore):
        def get_by_ids(self, ids: Any) -> Any:
            raise NotImplementedError

    with pytest.raises(ValueError, match="NoLookup cannot look documents up by id"):
        stored_ids(NoLookup(QRAGEmbeddings(adapter_qnet)), ["0"])


def test_llama_index_over_a_chroma_store_keeps_the_same_rule(adapter_qnet: QNetwork, texts: list[str],
                                                            questions: list[str]) -> None:
    chromadb = pytest.importorskip("chromadb")
    from llama_index.vector_stores.chroma import ChromaVectorStore

    collection = chromadb.EphemeralClient().create_collection(f"li-{uuid.uuid4().hex[:12]}",
                                                              configuration={"hnsw": {"space": "ip"}})
    r = QRAGLlamaIndexRetriever.from_vector_store(ChromaVectorStore(chroma_collection=collection), adapter_qnet,
                                                  similarity_top_k=2)
    r.insert_nodes([TextNode(text=t, id_=f"n{i}") for i, t in enumerate(texts[:4])])
    with pytest.raises(ValueError, match=r"ids \['n1'\] are already in this ChromaVectorStore"):
        r.insert_nodes([TextNode(text="An overwrite.", id_="n1"), TextNode(text="New.", id_="n9")])
    assert collection.count() == 4 and collection.get(ids=["n1"])["documents"] == [texts[1]]
    with pytest.raises(ValueError, match=r"ids \['nope'\] are not in this ChromaVectorStore; nothing was deleted"):
        r.delete_nodes(["n0", "nope"])
    with pytest.raises(ValueError, match="cannot delete every node"):
        r.delete_nodes(["n0", "n1", "n2", "n3"])
    assert collection.count() == 4
    r.insert(LlamaDocument(text="Mary moved to the cellar. She took the lamp.", id_="doc-a"), node_parser=SentenceSplitter())
    assert collection.count() == 5
    r.delete_ref_doc("doc-a")
    with pytest.raises(ValueError, match="no node of this retriever comes from document 'doc-a'"):
        r.delete_ref_doc("doc-a")
    r.delete_nodes(["n0"], delete_from_docstore=True)
    assert collection.count() == 3 and len(r.retrieve(questions[0])) == 2


# ------------------------------------------------------------------ 4. checked before anything is embedded
@pytest.mark.usefixtures("no_embedding")
def test_arguments_and_metadata_are_refused_before_embedding(adapter_qnet: QNetwork, texts: list[str]) -> None:
    docs = [Document(page_content=t, metadata={"n": i}, id=f"d{i}") for i, t in enumerate(texts)]
    with pytest.raises(ValueError, match=r"search_kwargs \['fetch_k'\] mean nothing to qrag.*qrag takes \['k'"):
        QRAGRetriever.from_documents(docs, model=adapter_qnet, search_kwargs={"k": 2, "fetch_k": 20})
    with pytest.raises(ValueError, match=r"\['k'\] given both as arguments and in search_kwargs"):
        QRAGRetriever.from_documents(docs, model=adapter_qnet, k=3, search_kwargs={"k": 2})
    with pytest.raises(ValueError, match=r"unknown argument\(s\) \['top_k'\]"):
        QRAGRetriever.from_documents(docs, model=adapter_qnet, top_k=2)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        QRAGRetriever.from_documents(docs, model=adapter_qnet, search_kwargs={"k": 0})
    with pytest.raises(ValueError, match=f"got 2 ids for {len(texts)} texts"):
        QRAGRetriever.from_documents(docs, model=adapter_qnet, ids=["a", "b"])
    dated = [{"n": 0}, {"n": 1, "when": datetime.date(2024, 5, 1)}]
    with pytest.raises(ValueError, match=r"metadatas\[1\]\['when'\] is a date, which JSON cannot hold .*"
                                         r"value.isoformat\(\) \('2024-05-01'\)"):
        QRAGRetriever.from_texts(texts[:2], adapter_qnet, dated)
    nodes = [TextNode(text="x", id_="a", metadata={"when": datetime.datetime(2024, 5, 1, 9)})]
    with pytest.raises(ValueError, match=r"node 'a''s metadata\['when'\] is a datetime.*isoformat"):
        QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=adapter_qnet)
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['top_k'\]"):
        QRAGLlamaIndexRetriever.from_defaults(nodes=[TextNode(text="x")], model=adapter_qnet, top_k=2)


def test_search_kwargs_and_explicit_ids_are_taken(adapter_qnet: QNetwork, texts: list[str], questions: list[str],
                                                  tiny_searcher: MultiHopSearcher) -> None:
    docs = [Document(page_content=t, metadata={"n": i}, id=f"d{i}") for i, t in enumerate(texts)]
    r = QRAGRetriever.from_documents(docs, model=adapter_qnet, search_kwargs={"k": 2, "filter": {"n": [1, 2, 3]}},
                                     ids=[f"e{i}" for i in range(len(texts))])
    assert r.k == 2 and r.filter == {"n": [1, 2, 3]}
    got = r.invoke(questions[0])
    assert len(got) == 2 and all(d.id == f"e{d.metadata['n']}" and d.metadata["n"] in (1, 2, 3) for d in got)
    assert QRAGRetriever(searcher=tiny_searcher, search_kwargs={"k": 1}).k == 1


def test_metadata_a_save_cannot_write_is_refused_at_add_too(adapter_qnet: QNetwork, texts: list[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    r = QRAGRetriever.from_texts(texts, adapter_qnet, k=2)
    li = QRAGLlamaIndexRetriever.from_defaults(nodes=[TextNode(text=t, id_=str(i)) for i, t in enumerate(texts)],
                                               model=adapter_qnet)
    monkeypatch.setattr(adapter_qnet, "embed_chunks", lambda *a, **k: pytest.fail("embedded before the check"))
    with pytest.raises(ValueError, match=r"metadatas\[0\]\['seen'\] is a set"):
        r.add_texts(["New."], [{"seen": {1, 2}}])
    with pytest.raises(ValueError, match=r"metadatas\[0\]\['when'\] is a list holding a date.*isoformat"):
        r.add_documents([Document(page_content="New.", metadata={"when": [datetime.date(2024, 1, 1)]})])
    assert len(r.searcher.index) == len(texts)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"node 'x''s metadata\['when'\] is a date"):
        li.insert_nodes([TextNode(text="New.", id_="x", metadata={"when": datetime.date(2024, 1, 1)})])
    assert len(li.searcher.index) == len(texts) and "x" not in li._nodes  # type: ignore[arg-type]


def test_check_metadatas_keeps_json_values() -> None:
    metas = check_metadatas([{"a": [1, 2.5, "x", None, True], "b": {"c": "d"}}, None], 2)
    assert metas == [{"a": [1, 2.5, "x", None, True], "b": {"c": "d"}}, {}]


# ------------------------------------------------------------------ 6. LlamaIndex's document conventions
def test_llama_index_insert_and_delete_ref_doc(adapter_qnet: QNetwork, texts: list[str], questions: list[str]) -> None:
    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(texts)]
    r = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=adapter_qnet, similarity_top_k=3)
    r.insert(LlamaDocument(text="The lamp is in the cellar.", id_="doc-one"))  # one node, as from_defaults does
    r.insert(LlamaDocument(text="Mary took the lamp. " * 80, id_="doc-many"), node_parser=SentenceSplitter(chunk_size=64, chunk_overlap=0))
    many = [i for i, n in r._nodes.items() if n.ref_doc_id == "doc-many"]
    assert "doc-one" in r._nodes and len(many) > 1 and len(r.searcher.index) == len(texts) + 1 + len(many)  # type: ignore[arg-type]
    r.delete_ref_doc("doc-many", delete_from_docstore=True)
    r.delete_ref_doc("doc-one")
    assert list(r._nodes) == [n.node_id for n in nodes] and r.searcher.index.ids == list(r._nodes)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="no node of this retriever comes from document 'doc-one'; nothing was deleted"):
        r.delete_ref_doc("doc-one")
    assert len(r.retrieve(questions[0])) == 3


def test_a_persisted_folder_points_load_index_from_storage_to_from_persist_dir(adapter_qnet: QNetwork, texts: list[str],
                                                                               tmp_path: Path) -> None:
    from llama_index.core import StorageContext, load_index_from_storage

    r = QRAGLlamaIndexRetriever.from_defaults(nodes=[TextNode(text=t) for t in texts], model=adapter_qnet,
                                              filters=MetadataFilters(filters=[MetadataFilter(key="n", value=1)]))
    folder = r.persist(tmp_path / "li")
    with pytest.raises(KeyError, match=r"load it with QRAGLlamaIndexRetriever.from_persist_dir\(path\)"):
        load_index_from_storage(StorageContext.from_defaults(persist_dir=str(folder)))
    assert QRAGLlamaIndexRetriever.from_persist_dir(folder).filters == r.filters
