"""Both retrievers over a living, filtered document set, with a shipped model on real passages: filters at every
hop, adds and deletes that rank as a fresh build, the score threshold, and saves that keep the changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.documents import Document
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever
from qrag.training.data import hotpot_pool as hp
from qrag.training.model import QNetwork
from qrag.training.search import Condition, Filter, FilterError, load_model


@pytest.fixture(scope="module")
def model() -> QNetwork:
    return load_model("qrag/hotpotqa-minilm")  # weighs lexical evidence: adds and deletes must keep BM25 right


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str], list[dict], list[str]]:  # type: ignore[type-arg]
    """60 real passages of the HotpotQA pool's validation split (the gold ones of 12 questions first)."""
    pool = hp.load_pool()
    rows = pool.split_rows("val")[:12]
    gold = list(dict.fromkeys(p for r in rows for p in r.passages))
    rest = [p for p in pool.pools["val"] if p not in gold][: 60 - len(gold)]
    texts = gold + rest
    metas = [{"n": i, "group": ["a", "b", "c"][i % 3], "year": 1990 + i} for i in range(len(texts))]
    return texts, [f"p{i}" for i in range(len(texts))], metas, [r.question for r in rows[:5]]


@pytest.fixture(scope="module")
def lc(model: QNetwork, corpus) -> QRAGRetriever:  # type: ignore[no-untyped-def]
    """A LangChain retriever over the 60 passages, shared by the tests that only read it."""
    texts, ids, metas, _ = corpus
    return QRAGRetriever.from_texts(texts, model, metas, ids, k=6)


@pytest.fixture(scope="module")
def li(model: QNetwork, corpus) -> QRAGLlamaIndexRetriever:  # type: ignore[no-untyped-def]
    """A LlamaIndex retriever over the 60 passages; each test builds its own over its searcher and nodes."""
    texts, ids, metas, _ = corpus
    return QRAGLlamaIndexRetriever.from_defaults(nodes=_nodes(texts, ids, metas), model=model)


def ids_of(docs: list[Document]) -> list[str]:
    return [d.id for d in docs if d.id is not None]


# ------------------------------------------------------------------ LangChain
def test_langchain_filters_hold_at_every_hop_and_fill_k_from_inside(lc: QRAGRetriever, corpus) -> None:  # type: ignore[no-untyped-def]
    questions = corpus[3]
    r = QRAGRetriever(searcher=lc.searcher, k=6, filter={"group": "a"})
    for q in questions:
        docs = r.invoke(q)
        assert len(docs) == 6 and all(d.metadata["group"] == "a" for d in docs)
        per_call = lc.invoke(q, filter=lambda m: m["group"] in ("b", "c") and m["year"] < 2020)  # no floor
        assert len(per_call) == 6 and all(d.metadata["group"] != "a" and d.metadata["year"] < 2020 for d in per_call)
        narrowed = r.invoke(q, filter=lambda m: m["year"] < 2020)  # the floor holds: group 'a' and before 2020
        assert len(narrowed) == 6 and all(d.metadata["group"] == "a" and d.metadata["year"] < 2020 for d in narrowed)
        assert r.invoke(q, filter={"group": ["b", "c"]}, k=3) == []  # a call never widens the floor
        assert ids_of(r.invoke(q, filter=None)) == ids_of(docs)
    assert ids_of(r.invoke(questions[0], filter={"n": [3, 4]})) == ["p3"]  # p4 is in group 'b'
    assert r.invoke(questions[0], filter={"shelf": "top"}) == []  # a key no document has: nothing
    assert r.batch(questions[:2], filter={"group": "b"}) == [[], []]
    assert [sorted(ids_of(d)) for d in r.batch(questions[:2], filter={"n": [0, 3, 6]})] == [["p0", "p3", "p6"]] * 2


def test_langchain_bad_filters_and_thresholds_are_refused_before_a_search(model: QNetwork, corpus) -> None:  # type: ignore[no-untyped-def]
    texts, ids, metas, questions = corpus
    with pytest.raises(ValueError, match="a filter is a dict"):  # pydantic's ValidationError is a ValueError
        QRAGRetriever.from_texts(texts[:5], model, k=2, filter="group=a")
    r = QRAGRetriever.from_texts(texts[:5], model, metas[:5], ids[:5], k=2)
    with pytest.raises(FilterError, match=r"'group' ==: the value must be"):
        r.invoke(questions[0], filter={"group": {"$eq": {"x": 1}}})
    # a number is not ordered against a string: it matches no order (as in a store), and fails no search
    assert r.invoke(questions[0], filter=Filter((Condition("year", ">", "x"),))) == []
    with pytest.raises(ValueError, match="score_threshold must be a finite number"):
        r.invoke(questions[0], score_threshold=float("nan"))


def test_langchain_score_threshold_drops_low_scores_in_hop_order(lc: QRAGRetriever, corpus) -> None:  # type: ignore[no-untyped-def]
    questions = corpus[3]
    r = QRAGRetriever(searcher=lc.searcher, k=5)
    full = r.invoke(questions[1])
    cut = sorted(d.metadata["score"] for d in full)[2]
    kept = r.invoke(questions[1], score_threshold=cut)
    assert ids_of(kept) == [d.id for d in full if d.metadata["score"] >= cut] and len(kept) == 3
    assert QRAGRetriever(searcher=lc.searcher, k=5, score_threshold=1e9).invoke(questions[1]) == []


@pytest.mark.slow
def test_langchain_adds_and_deletes_rank_as_a_fresh_build_and_are_saved(model: QNetwork, corpus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    texts, ids, metas, questions = corpus
    r = QRAGRetriever.from_texts(texts[:40], model, metas[:40], ids[:40], k=4)
    assert r.add_texts(texts[40:50], metas[40:50], ids[40:50]) == ids[40:50]
    docs = [Document(page_content=t, metadata=m, id=i) for t, m, i in zip(texts[50:], metas[50:], ids[50:], strict=True)]
    assert r.add_documents(docs) == ids[50:]
    r.delete(["p3", "p41", "p55"])
    keep = [i for i in range(60) if ids[i] not in ("p3", "p41", "p55")]
    fresh = QRAGRetriever.from_texts([texts[i] for i in keep], model, [metas[i] for i in keep], [ids[i] for i in keep], k=4)
    for q in questions:
        assert ids_of(r.invoke(q)) == ids_of(fresh.invoke(q))
        assert ids_of(r.invoke(q, filter={"group": "c"})) == ids_of(fresh.invoke(q, filter={"group": "c"}))
    r = r.with_floor({"group": ["a", "b"]})
    r.save_local(tmp_path / "r")
    loaded = QRAGRetriever.load_local(tmp_path / "r")
    assert loaded.filter == {"group": ["a", "b"]}
    assert [ids_of(loaded.invoke(q)) for q in questions] == [ids_of(r.invoke(q)) for q in questions]
    r.with_floor(lambda m: True).save_local(tmp_path / "r2")
    with pytest.raises(ValueError, match="load it with the floor given again"):
        QRAGRetriever.load_local(tmp_path / "r2")


def test_langchain_add_and_delete_name_what_they_refuse(model: QNetwork, corpus) -> None:  # type: ignore[no-untyped-def]
    texts, ids, metas, _ = corpus
    r = QRAGRetriever.from_texts(texts[:5], model, metas[:5], ids[:5], k=2)
    with pytest.raises(ValueError, match=r"ids \['p1'\] are already in this index"):
        r.add_texts(["another passage"], ids=["p1"])
    with pytest.raises(ValueError, match=r"ids \['p9'\] are not in this index"):
        r.delete(["p0", "p9"])
    assert len(r.add_texts(["another passage"])) == 1 and len(r.searcher.index) == 6  # type: ignore[arg-type]


def test_a_corpus_without_an_indexable_word_builds_and_answers(model: QNetwork) -> None:
    # Every word of these passages is a stopword or too short for BM25: the lexical evidence is 0, not a crash.
    r = QRAGRetriever.from_texts(["a b c", "d e f"], model=model, k=2)
    docs = r.invoke("a b c?")
    assert sorted(ids_of(docs)) == ["0", "1"] and all(d.metadata["score"] == d.metadata["score"] for d in docs)
    nodes = QRAGLlamaIndexRetriever.from_defaults(nodes=_nodes(["a b c", "d e f"], ["x", "y"], [{}, {}]), model=model)
    assert sorted(n.node.node_id for n in nodes.retrieve("a b c?")) == ["x", "y"]


# ------------------------------------------------------------------ LlamaIndex
def _nodes(texts: list[str], ids: list[str], metas: list[dict]) -> list[TextNode]:  # type: ignore[type-arg]
    return [TextNode(text=t, id_=i, metadata=m) for t, i, m in zip(texts, ids, metas, strict=True)]


@pytest.mark.parametrize(("operator", "value", "allowed"), [
    (FilterOperator.EQ, "b", lambda m: m["group"] == "b"), (FilterOperator.NE, "b", lambda m: m["group"] != "b"),
    (FilterOperator.IN, ["a", "c"], lambda m: m["group"] in ("a", "c")),
    (FilterOperator.NIN, ["a", "c"], lambda m: m["group"] not in ("a", "c")),
])
def test_llama_index_equality_operators(li: QRAGLlamaIndexRetriever, corpus, operator, value, allowed) -> None:  # type: ignore[no-untyped-def]
    questions = corpus[3]
    r = QRAGLlamaIndexRetriever(li.searcher, list(li._nodes.values()), similarity_top_k=5,
                                filters=MetadataFilters(filters=[MetadataFilter(key="group", operator=operator, value=value)]))
    got = r.retrieve(questions[0])
    assert len(got) == 5 and all(allowed(n.node.metadata) for n in got)


@pytest.mark.parametrize(("filters", "allowed"), [
    ([("year", FilterOperator.GT, 2040)], lambda m: m["year"] > 2040),
    ([("year", FilterOperator.GTE, 2045)], lambda m: m["year"] >= 2045),
    ([("year", FilterOperator.LT, 1995)], lambda m: m["year"] < 1995),
    ([("year", FilterOperator.LTE, 1994)], lambda m: m["year"] <= 1994),
])
def test_llama_index_order_operators_and_fewer_matches_than_k(li: QRAGLlamaIndexRetriever, corpus, filters,  # type: ignore[no-untyped-def]
                                                              allowed) -> None:
    _, ids, metas, questions = corpus
    mf = MetadataFilters(filters=[MetadataFilter(key=k, operator=o, value=v) for k, o, v in filters])
    r = QRAGLlamaIndexRetriever(li.searcher, list(li._nodes.values()), similarity_top_k=20, filters=mf)
    got = r.retrieve(questions[2])
    assert {n.node.node_id for n in got} == {i for i, m in zip(ids, metas, strict=True) if allowed(m)}


def test_llama_index_and_or_nested(li: QRAGLlamaIndexRetriever, corpus) -> None:  # type: ignore[no-untyped-def]
    _, ids, metas, questions = corpus
    late_a = MetadataFilters(filters=[MetadataFilter(key="group", value="a"),
                                      MetadataFilter(key="year", operator=FilterOperator.GTE, value=2030)])
    mf = MetadataFilters(filters=[late_a, MetadataFilter(key="n", operator=FilterOperator.IN, value=[1, 2])],
                         condition=FilterCondition.OR)
    r = QRAGLlamaIndexRetriever(li.searcher, list(li._nodes.values()), similarity_top_k=30, filters=mf)
    expected = {i for i, m in zip(ids, metas, strict=True) if (m["group"] == "a" and m["year"] >= 2030) or m["n"] in (1, 2)}
    assert {n.node.node_id for n in r.retrieve(questions[3])} == expected


def test_llama_index_refuses_what_it_cannot_apply(model: QNetwork, corpus) -> None:  # type: ignore[no-untyped-def]
    texts, ids, metas, _ = corpus
    nodes = _nodes(texts[:4], ids[:4], metas[:4])
    with pytest.raises(FilterError, match="operator 'text_match' on key 'group' is not supported"):
        QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=model, filters=MetadataFilters(
            filters=[MetadataFilter(key="group", operator=FilterOperator.TEXT_MATCH, value="a")]))
    with pytest.raises(FilterError, match="condition 'not' is not supported"):
        QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=model, filters=MetadataFilters(
            filters=[MetadataFilter(key="group", value="a")], condition=FilterCondition.NOT))


@pytest.mark.slow
def test_llama_index_inserts_and_deletes_rank_as_a_fresh_build_and_persist(model: QNetwork, corpus,  # type: ignore[no-untyped-def]
                                                                          tmp_path: Path) -> None:
    texts, ids, metas, questions = corpus
    r = QRAGLlamaIndexRetriever.from_defaults(nodes=_nodes(texts[:45], ids[:45], metas[:45]), model=model,
                                              similarity_top_k=4, score_threshold=-1e9,
                                              filters=MetadataFilters(filters=[MetadataFilter(key="group", value="a",
                                                                      operator=FilterOperator.NE)]))
    r.insert_nodes(_nodes(texts[45:], ids[45:], metas[45:]))
    r.delete_nodes(["p0", "p50"])
    keep = [i for i in range(60) if ids[i] not in ("p0", "p50")]
    fresh = QRAGLlamaIndexRetriever.from_defaults(
        nodes=_nodes([texts[i] for i in keep], [ids[i] for i in keep], [metas[i] for i in keep]), model=model,
        similarity_top_k=4, filters=r.filters)
    for q in questions:
        assert [n.node.node_id for n in r.retrieve(q)] == [n.node.node_id for n in fresh.retrieve(q)]
    r.persist(tmp_path / "li")
    loaded = QRAGLlamaIndexRetriever.from_persist_dir(tmp_path / "li")
    assert loaded.filters == r.filters and loaded.score_threshold == -1e9
    assert [[n.node.node_id for n in loaded.retrieve(q)] for q in questions] == [
        [n.node.node_id for n in r.retrieve(q)] for q in questions]
    with pytest.raises(ValueError, match=r"ids \['nope'\] are not in this index"):
        r.delete_nodes(["nope"])
    with pytest.raises(ValueError, match=r"ids \['p1'\] are already in this index"):
        r.insert_nodes(_nodes(["x"], ["p1"], [{}]))


def test_llama_index_score_threshold(li: QRAGLlamaIndexRetriever, corpus) -> None:  # type: ignore[no-untyped-def]
    questions = corpus[3]
    r = QRAGLlamaIndexRetriever(li.searcher, list(li._nodes.values()), similarity_top_k=5)
    scores = [n.score for n in r.retrieve(questions[4])]
    cut = sorted(scores)[3]  # type: ignore[type-var]
    r.score_threshold = cut
    assert [n.score for n in r.retrieve(questions[4])] == [s for s in scores if s >= cut]  # type: ignore[operator]


# ------------------------------------------------------------------ long passages
def test_a_long_passage_is_found_by_its_window_and_returned_once_whole(model: QNetwork, corpus,  # type: ignore[no-untyped-def]
                                                                       tmp_path: Path) -> None:
    """A question's first gold passage glued after 12 other passages (past the 256 tokens the model reads) and added
    as one document: both retrievers return it once, whole, at the rank its window earns; cut, Q alone does not find it."""
    texts, ids, metas, questions = corpus
    target = texts[0]  # the first question's first gold passage
    filler = " ".join(texts[30:42])
    assert len(model.tokenizer(filler)["input_ids"]) > model.config.max_chunk_tokens
    long = f"{filler} {target}"
    others = [t for t in texts if t != target and t not in texts[30:42]]
    lc = QRAGRetriever.from_texts(others, model, k=4)
    lc.add_texts([long], ids=["long"])
    got = lc.invoke(questions[0])
    assert [d.id for d in got].count("long") == 1
    assert next(d for d in got if d.id == "long").page_content == long
    lc.save_local(tmp_path / "lc")
    assert [d.id for d in QRAGRetriever.load_local(tmp_path / "lc").invoke(questions[0])] == [d.id for d in got]
    with pytest.warns(UserWarning, match="longer than this model's max_chunk_tokens"):
        cut = QRAGRetriever.from_texts([*others, long], model, ids=[*map(str, range(len(others))), "long"], k=4,
                                       long_chunks="cut")
    # Cut, its vector is the filler's: Q alone does not find it. The BM25 evidence reads the whole text, so with it
    # the cut passage can still come back, but below the rank its window earns (question pairs made of stop words
    # no longer lift the passages richest in them, so this one can reach the last place of k).
    assert "long" not in [d.id for d in cut.invoke(questions[0], lexical_weight=0.0)]
    cut_ids = [d.id for d in cut.invoke(questions[0])]
    assert "long" not in cut_ids or cut_ids.index("long") > [d.id for d in got].index("long")
    li = QRAGLlamaIndexRetriever.from_defaults(nodes=[TextNode(text=t, id_=str(i)) for i, t in enumerate(others)]
                                               + [TextNode(text=long, id_="long")], model=model, similarity_top_k=4)
    nodes = li.retrieve(questions[0])
    assert [n.node.node_id for n in nodes].count("long") == 1
    with pytest.raises(ValueError, match="long_chunks must be one of"):
        QRAGRetriever.from_texts(others, model, long_chunks="split")  # type: ignore[arg-type]
