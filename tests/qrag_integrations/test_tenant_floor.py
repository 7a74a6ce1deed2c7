"""A tenant's floor on `QRAGRetriever` is a promise: it cannot be lifted on the live object (assignment, `model_copy`,
`configurable_fields`), a save records it without touching the retriever, `load_local` of a floored save needs the
floor again, returned metadata is the caller's own copy, and a batch's results go to the retriever that searched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.runnables import ConfigurableField

from qrag.integrations import QRAGRetriever
from qrag.training.model.qnet import QNetwork
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher

TENANT_A = {"n": [0, 1, 2, 3, 4, 5]}  # a dict floor: rows 0-5
ALL = 12


def _ns(docs: list[Document]) -> set[int]:
    return {d.metadata["n"] for d in docs}


def _in_b(metadata: dict[str, Any]) -> bool:  # a function floor: rows 6-11
    return bool(metadata["n"] >= 6)


@pytest.fixture()
def searcher(adapter_qnet: QNetwork, texts: list[str]) -> MultiHopSearcher:
    metas = [{"n": i, "tags": ["kitchen" if i % 2 else "garden"]} for i in range(ALL)]
    return MultiHopSearcher(adapter_qnet, ChunkIndex.from_texts(adapter_qnet, texts, metadatas=metas))


def test_assignment_model_copy_and_configurable_fields_cannot_lift_the_floor(searcher: MultiHopSearcher,
                                                                            questions: list[str]) -> None:
    r = QRAGRetriever(searcher=searcher, k=ALL, max_hops=2, filter=TENANT_A)
    with pytest.raises(AttributeError, match="floor"):
        r.filter = None
    with pytest.raises(ValueError, match="floor"):
        r.model_copy(update={"filter": None})
    with pytest.raises(ValueError, match="floor"):
        r.configurable_fields(filter=ConfigurableField(id="tenant_filter"))
    assert r.model_copy(update={"k": 2}).invoke(questions[0], filter={"n": [7, 8]}) == []  # narrows, never lifts
    assert _ns(r.invoke(questions[0])) == set(TENANT_A["n"])
    # Other fields stay configurable, and the rebuilt retriever keeps the floor.
    configurable = r.configurable_fields(k=ConfigurableField(id="k"))
    assert _ns(configurable.invoke(questions[0], config={"configurable": {"k": ALL}})) == set(TENANT_A["n"])


def test_the_floor_is_taken_when_the_retriever_is_built(searcher: MultiHopSearcher, questions: list[str]) -> None:
    spec: dict[str, Any] = {"n": [0, 1]}
    r = QRAGRetriever(searcher=searcher, k=ALL, max_hops=2, filter=spec)
    spec["n"].extend(range(2, ALL))  # the caller's dict, edited afterwards
    assert _ns(r.invoke(questions[0])) == {0, 1} and r.filter == {"n": [0, 1]}
    # pydantic's unvalidated constructor builds a retriever whose floor holds all the same.
    unchecked = QRAGRetriever.model_construct(searcher=searcher, k=ALL, max_hops=2, filter={"n": [3]})
    assert _ns(unchecked.invoke(questions[0])) == {3}


def test_with_floor_makes_a_new_retriever_over_the_same_searcher(searcher: MultiHopSearcher, questions: list[str]) -> None:
    a = QRAGRetriever(searcher=searcher, k=ALL, max_hops=2, filter=TENANT_A)
    b = a.with_floor(_in_b)
    assert b is not a and b.searcher is a.searcher and b.k == a.k
    assert _ns(b.invoke(questions[0])) == set(range(6, ALL)) and _ns(a.invoke(questions[0])) == set(TENANT_A["n"])
    assert _ns(a.with_floor(None).invoke(questions[0])) == set(range(ALL))  # explicitly, never by accident


def test_a_function_floor_is_saved_as_a_fact_and_must_be_given_again(searcher: MultiHopSearcher, questions: list[str],
                                                                     tmp_path: Path) -> None:
    r = QRAGRetriever(searcher=searcher, k=ALL, max_hops=2, filter=_in_b)
    r.save_local(tmp_path / "r")
    assert r.filter is _in_b and _ns(r.invoke(questions[0])) == set(range(6, ALL))  # the live object is untouched
    head = json.loads((tmp_path / "r" / "retriever.json").read_text())
    assert head["floor"] == "function"
    with pytest.raises(ValueError, match="unknown filter operator"):  # a loader that predates the record refuses it
        QRAGRetriever(searcher=searcher, **head["fields"])
    with pytest.raises(ValueError, match=r"filter=") as refused:
        QRAGRetriever.load_local(tmp_path / "r")
    assert "floor" in str(refused.value)
    loaded = QRAGRetriever.load_local(tmp_path / "r", filter=_in_b)
    assert loaded.filter is _in_b and _ns(loaded.invoke(questions[0])) == set(range(6, ALL))


def test_a_dict_floor_is_restored_and_a_floor_given_on_load_narrows_it(searcher: MultiHopSearcher, questions: list[str],
                                                                       tmp_path: Path) -> None:
    QRAGRetriever(searcher=searcher, k=ALL, max_hops=2, filter=TENANT_A).save_local(tmp_path / "a")
    assert json.loads((tmp_path / "a" / "retriever.json").read_text())["floor"] == "dict"
    loaded = QRAGRetriever.load_local(tmp_path / "a")
    assert loaded.filter == TENANT_A and _ns(loaded.invoke(questions[0])) == set(TENANT_A["n"])
    narrowed = QRAGRetriever.load_local(tmp_path / "a", filter={"n": [4, 5, 6, 7]})
    assert _ns(narrowed.invoke(questions[0])) == {4, 5}  # both floors hold: the saved one is never lifted
    QRAGRetriever(searcher=searcher, k=ALL, max_hops=2).save_local(tmp_path / "none")
    assert QRAGRetriever.load_local(tmp_path / "none").filter is None
    assert _ns(QRAGRetriever.load_local(tmp_path / "none", filter=_in_b).invoke(questions[0])) == set(range(6, ALL))


def test_a_save_without_the_floor_field_loads_as_before(searcher: MultiHopSearcher, questions: list[str],
                                                       tmp_path: Path) -> None:
    QRAGRetriever(searcher=searcher, k=ALL, max_hops=2, filter=TENANT_A).save_local(tmp_path / "old")
    head_path = tmp_path / "old" / "retriever.json"
    head = json.loads(head_path.read_text())
    del head["floor"]  # as saves written before floors were recorded
    head_path.write_text(json.dumps(head))
    assert _ns(QRAGRetriever.load_local(tmp_path / "old").invoke(questions[0])) == set(TENANT_A["n"])


def test_returned_metadata_is_the_callers_own(searcher: MultiHopSearcher, questions: list[str], tmp_path: Path) -> None:
    r = QRAGRetriever(searcher=searcher, k=ALL, max_hops=2)
    index = searcher.index
    assert index is not None
    stored = {c: json.dumps(index.chunk(i).metadata) for i, c in enumerate(index.ids)}
    first = r.invoke(questions[0])
    for d in first:
        d.metadata["tags"].append("edited")
    assert {c: json.dumps(index.chunk(i).metadata) for i, c in enumerate(index.ids)} == stored
    assert all("edited" not in d.metadata["tags"] for d in r.invoke(questions[0]))
    assert _ns(r.invoke(questions[0], filter={"tags": "edited"})) == set()
    saved = json.loads((r.save_local(tmp_path / "r") / "index" / "index.json").read_text())
    assert all("edited" not in m["tags"] for m in saved["metadatas"])


def test_a_batch_gives_its_results_to_its_own_retriever_only(searcher: MultiHopSearcher, questions: list[str]) -> None:
    a = QRAGRetriever(searcher=searcher, k=ALL, max_hops=2, filter=TENANT_A)
    b = QRAGRetriever(searcher=searcher, k=ALL, max_hops=2, filter=_in_b)
    seen: list[set[int]] = []

    class AskB(BaseCallbackHandler):
        def on_retriever_start(self, *args: Any, **kwargs: Any) -> None:
            if not seen:  # b's own run reaches this handler too
                seen.append(set())
                seen[0] = _ns(b.invoke(questions[0]))

    batched = a.batch([questions[0], questions[1]], config={"callbacks": [AskB()]})
    assert seen == [set(range(6, ALL))]
    assert _ns(batched[0]) == set(TENANT_A["n"])
    # Inside a's batch, a call of a with other arguments searches for itself.
    seen.clear()

    class AskAgain(BaseCallbackHandler):
        def on_retriever_start(self, *args: Any, **kwargs: Any) -> None:
            if not seen:
                seen.append(set())
                seen[0] = _ns(a.invoke(questions[0], filter={"n": [1, 2]}))

    a.batch([questions[0]], config={"callbacks": [AskAgain()]})
    assert seen == [{1, 2}]


def test_the_floor_shown_is_the_floor_enforced_and_saved(searcher: MultiHopSearcher, questions: list[str],
                                                        tmp_path: Path) -> None:
    """`retriever.filter` is a read-only copy: an in-place edit of it (or of a list inside it) raises, so the floor
    shown is the one every search applies and every save writes; copies of it are plain, editable dicts."""
    given = {"n": [0, 1, 2, 3, 4, 5]}
    retriever = QRAGRetriever(searcher=searcher, filter=given, k=ALL)
    given["n"].append(7)  # the caller's own dict: the floor was taken as it was
    assert retriever.filter == TENANT_A
    with pytest.raises(TypeError, match="with_floor"):
        retriever.filter["n"] = [7]  # type: ignore[index]
    with pytest.raises(TypeError, match="with_floor"):
        retriever.filter["n"].append(7)  # type: ignore[index]
    with pytest.raises(TypeError, match="with_floor"):
        retriever.filter.update({"n": 7})  # type: ignore[union-attr]
    assert retriever.filter == TENANT_A and _ns(retriever.invoke(questions[0])) <= set(TENANT_A["n"])
    retriever.save_local(str(tmp_path / "saved"))
    assert QRAGRetriever.load_local(tmp_path / "saved").filter == TENANT_A
    mine = dict(retriever.filter)  # type: ignore[arg-type]
    mine["n"] = [7]
    wider = retriever.with_floor({**retriever.filter, "n": [6, 7]})  # type: ignore[dict-item]
    assert _ns(wider.invoke(questions[0])) <= {6, 7}


def test_a_store_error_in_a_batch_is_returned_in_its_runs_place(searcher: MultiHopSearcher,
                                                               questions: list[str]) -> None:
    """`batch(return_exceptions=True)`: any error of the shared search (a store's RuntimeError too) comes back as
    each run's result, never out of `batch`."""
    retriever = QRAGRetriever(searcher=searcher, k=2)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the store went away")

    searcher.search = broken  # type: ignore[method-assign]
    got = retriever.batch(questions[:2], return_exceptions=True)
    assert len(got) == 2 and all(isinstance(g, RuntimeError) and "went away" in str(g) for g in got)
    with pytest.raises(RuntimeError, match="went away"):
        retriever.batch(questions[:2])
