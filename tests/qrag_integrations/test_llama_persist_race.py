"""`QRAGLlamaIndexRetriever` reads and saves one version: `persist` beside a thread of inserts writes a folder that
loads and equals some version, a retrieval's node bodies come from the version its hits do, returned nodes are the
caller's own, and the floor (`filters`) cannot be replaced on the live object."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import llama_index.core.instrumentation as instrument
import pytest
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.schema import MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from qrag.integrations import QRAGHopEvent, QRAGLlamaIndexRetriever
from qrag.training.model.qnet import QNetwork


def _node(i: int, text: str, **meta: Any) -> TextNode:
    node = TextNode(text=text, id_=f"x{i}", metadata={"n": i, "tags": ["t"], **meta})
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i}")
    return node


@pytest.fixture()
def retriever(texts: list[str], adapter_qnet: QNetwork) -> QRAGLlamaIndexRetriever:
    nodes = [_node(i, t) for i, t in enumerate(texts[:6])]
    return QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=adapter_qnet, similarity_top_k=30, max_hops=1)


def test_every_persist_beside_a_thread_of_inserts_loads_and_equals_a_version(
    retriever: QRAGLlamaIndexRetriever, texts: list[str], tmp_path: Path
) -> None:
    first = retriever.searcher.index
    assert first is not None
    versions = [list(zip(first.ids, first.texts, strict=True))]  # every version, by the inserts that made them
    stop = threading.Event()
    errors: list[BaseException] = []

    def insert() -> None:
        try:
            for i in range(100, 400):
                if stop.is_set():
                    break
                node = _node(i, f"{texts[i % len(texts)]} ({i})")
                retriever.insert_nodes([node])
                versions.append([*versions[-1], (node.node_id, node.get_content(metadata_mode=MetadataMode.EMBED))])
        except BaseException as e:  # noqa: BLE001 - the main thread reports it
            errors.append(e)

    writer = threading.Thread(target=insert)
    writer.start()
    saves = []
    try:
        for attempt in range(6):
            folder = retriever.persist(tmp_path / f"p{attempt}")
            index = QRAGLlamaIndexRetriever.from_persist_dir(folder).searcher.index  # refuses an id without its node
            assert index is not None
            saves.append(list(zip(index.ids, index.texts, strict=True)))
    finally:
        stop.set()
        writer.join()
    assert not errors
    for saved in saves:
        assert saved == versions[len(saved) - len(versions[0])]


def test_a_persist_that_cannot_be_loaded_leaves_the_previous_save(retriever: QRAGLlamaIndexRetriever,
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = retriever.persist(tmp_path / "p")
    before = {n.node.node_id for n in QRAGLlamaIndexRetriever.from_persist_dir(folder).retrieve("milk")}
    retriever.insert_nodes([_node(50, "The ball is in the garden.")])
    import qrag.integrations.llama_index_retriever as module

    real = module.SimpleDocumentStore.to_dict
    monkeypatch.setattr(module.SimpleDocumentStore, "to_dict",
                        lambda self: {**real(self), "docstore/data": {}})  # a docstore without its nodes
    with pytest.raises(ValueError, match="would not load beside the index"):
        retriever.persist(folder)
    assert {n.node.node_id for n in QRAGLlamaIndexRetriever.from_persist_dir(folder).retrieve("milk")} == before


def test_a_node_mid_insert_is_never_served_half_made(retriever: QRAGLlamaIndexRetriever,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    index = retriever.searcher.index
    assert index is not None
    seen: list[list[TextNode]] = []
    add = index.add

    def add_then_read(*args: Any, **kwargs: Any) -> list[str]:
        ids = add(*args, **kwargs)  # the index holds the node now; the retriever may not have published it yet
        seen.append([n.node for n in retriever.retrieve("Where is the milk?")])  # type: ignore[misc]
        return ids

    monkeypatch.setattr(index, "add", add_then_read)
    retriever.insert_nodes([_node(7, "The milk is on the table.", place="table")])
    for node in seen[0]:
        assert node.text == node.get_content() and node.source_node is not None  # its own text, its relationships
    assert [n.node for n in retriever.retrieve("milk") if n.node.node_id == "x7"][0].text == "The milk is on the table."


def test_a_node_deleted_and_reinserted_meanwhile_comes_back_as_the_version_that_scored_it(
    retriever: QRAGLlamaIndexRetriever,
) -> None:
    old = {n.node.node_id: (n.node.get_content(), n.score) for n in retriever.retrieve("Where is the milk?")}
    replaced = False

    class Replace(BaseEventHandler):
        @classmethod
        def class_name(cls) -> str:
            return "Replace"

        def handle(self, event: BaseEvent, **kwargs: Any) -> None:
            nonlocal replaced
            if isinstance(event, QRAGHopEvent) and not replaced:  # the search is done; its nodes are not made yet
                replaced = True
                retriever.delete_nodes(["x2"])
                retriever.insert_nodes([_node(2, "Sandra is in the kitchen.")])

    handler = Replace()
    root = instrument.get_dispatcher()
    root.add_event_handler(handler)
    try:
        during = {n.node.node_id: (n.node.get_content(), n.score) for n in retriever.retrieve("Where is the milk?")}
    finally:
        root.event_handlers.remove(handler)
    assert replaced and during == old  # the version the search read, bodies and scores alike
    after = {n.node.node_id: n.node.get_content() for n in retriever.retrieve("Where is the milk?")}
    assert after["x2"] == "Sandra is in the kitchen."


def test_returned_nodes_are_the_callers_own(retriever: QRAGLlamaIndexRetriever, tmp_path: Path) -> None:
    mine = _node(9, "John dropped the apple.")
    retriever.insert_nodes([mine])
    mine.metadata["tags"].append("edited by the caller after inserting")
    for n in retriever.retrieve("apple"):
        n.node.metadata["tags"].append("edited")
        n.node.relationships.clear()
    again = retriever.retrieve("apple")
    assert all(n.node.metadata["tags"] == ["t"] and n.node.source_node is not None for n in again)
    loaded = QRAGLlamaIndexRetriever.from_persist_dir(retriever.persist(tmp_path / "p"))
    assert all(n.node.metadata["tags"] == ["t"] for n in loaded.retrieve("apple"))


def test_the_floor_cannot_be_replaced_on_the_live_object(texts: list[str], adapter_qnet: QNetwork,
                                                         tmp_path: Path) -> None:
    floor = MetadataFilters(filters=[MetadataFilter(key="n", value=[0, 1, 2], operator="in")])
    nodes = [_node(i, t) for i, t in enumerate(texts[:6])]
    r = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=adapter_qnet, similarity_top_k=30, max_hops=1,
                                              filters=floor)
    floor.filters.clear()  # the caller's object, edited afterwards
    with pytest.raises(AttributeError, match="floor"):
        r.filters = None
    r.filters.filters.clear()  # type: ignore[union-attr]  # a copy: the floor is unchanged
    assert {n.node.metadata["n"] for n in r.retrieve("milk")} == {0, 1, 2}
    folder = r.persist(tmp_path / "p")
    assert {n.node.metadata["n"] for n in QRAGLlamaIndexRetriever.from_persist_dir(folder).retrieve("milk")} == {0, 1, 2}
    narrower = MetadataFilters(filters=[MetadataFilter(key="n", value=[2, 3], operator="in")])
    narrowed = QRAGLlamaIndexRetriever.from_persist_dir(folder, filters=narrower)
    assert {n.node.metadata["n"] for n in narrowed.retrieve("milk")} == {2}
    other = r.with_floor(narrower)  # another tenant over the same nodes
    r.insert_nodes([_node(13, "The milk is cold.", n=3), _node(14, "The milk is warm.", n=0)])
    assert {n.node.node_id for n in other.retrieve("milk")} == {"x2", "x3", "x13"}
    assert {n.node.node_id for n in r.retrieve("milk")} == {"x0", "x1", "x2", "x14"}


def test_retrievers_over_one_index_see_each_others_changes(retriever: QRAGLlamaIndexRetriever) -> None:
    other = QRAGLlamaIndexRetriever(retriever.searcher, list(retriever._nodes.values()), similarity_top_k=30, max_hops=1)
    retriever.insert_nodes([_node(8, "Daniel went back to the kitchen.")])
    assert "x8" in {n.node.node_id for n in other.retrieve("kitchen")}
    other.delete_nodes(["x8", "x0"])
    assert not {"x8", "x0"} & {n.node.node_id for n in retriever.retrieve("kitchen")}
