"""A living index: filtered hops, adds and deletes without a rebuild, and the score threshold, in the core."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qrag.training.model.qnet import QNetwork
from qrag.training.search.filters import FilterError
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher

TEXTS = [f"{who} {verb} the {what}." for who in ("Mary", "John", "Sandra", "Daniel")
         for verb, what in (("took", "milk"), ("dropped", "apple"), ("went to", "garden"))]
META = [{"who": t.split()[0], "n": i} for i, t in enumerate(TEXTS)]
IDS = [f"d{i}" for i in range(len(TEXTS))]
QUESTIONS = ["Where is the milk?", "Who dropped the apple?"]


@pytest.fixture()
def searcher(tiny_qnet: QNetwork) -> MultiHopSearcher:
    return MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, TEXTS, IDS, META))


def ranking(s: MultiHopSearcher, **kw: object) -> list[list[str]]:
    return [[h.chunk.id for h in r.hits] for r in s.search(QUESTIONS, **kw)]  # type: ignore[arg-type]


@pytest.mark.parametrize("opts", [{"k": 5}, {"k": 3, "beam_size": 2}, {"k": 5, "fill": "question"},
                                  {"k": None, "stop_threshold": -1e9}])
def test_every_hop_and_the_top_up_stay_inside_the_filter(searcher: MultiHopSearcher, opts: dict) -> None:  # type: ignore[type-arg]
    inside = {i for i, m in zip(IDS, META, strict=True) if m["who"] in ("Mary", "John")}  # 6 of 12
    for result in searcher.search(QUESTIONS, filter={"who": ["Mary", "John"]}, **opts):
        ids = [h.chunk.id for h in result.hits]
        assert ids and set(ids) <= inside and len(set(ids)) == len(ids)
        if opts.get("k") is not None:
            assert len(ids) == opts["k"]  # filled up to k from inside the filter


def test_the_filtered_hops_are_the_hops_over_the_matching_chunks_alone(searcher: MultiHopSearcher,
                                                                       tiny_qnet: QNetwork) -> None:
    keep = [i for i, m in enumerate(META) if m["n"] % 3 == 0]
    alone = MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, [TEXTS[i] for i in keep], [IDS[i] for i in keep]))
    assert ranking(searcher, k=3, filter=lambda m: m["n"] % 3 == 0) == ranking(alone, k=3)


def test_fewer_matches_than_k_returns_what_matches_and_an_unknown_key_nothing(searcher: MultiHopSearcher) -> None:
    assert [sorted(r) for r in ranking(searcher, k=5, filter={"who": "Daniel"})] == [["d10", "d11", "d9"]] * 2
    assert ranking(searcher, k=5, filter={"colour": "red"}) == [[], []]
    assert ranking(searcher, k=None, filter={"colour": "red"}) == [[], []]


def test_a_malformed_filter_is_refused_before_any_search(searcher: MultiHopSearcher) -> None:
    with pytest.raises(FilterError, match="a dict"):
        searcher.search(QUESTIONS, filter="who=Mary")  # type: ignore[arg-type]


def test_adds_and_deletes_rank_as_a_fresh_build_and_embed_only_what_is_added(tiny_qnet: QNetwork) -> None:
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS[:8], IDS[:8], META[:8], lexical=True)
    calls: list[int] = []
    embed = tiny_qnet.embed_chunks
    tiny_qnet.embed_chunks = lambda texts, *a, **k: calls.append(len(texts)) or embed(texts, *a, **k)  # type: ignore[method-assign]
    try:
        assert index.add(tiny_qnet, TEXTS[8:], IDS[8:], META[8:]) == IDS[8:]
    finally:
        del tiny_qnet.embed_chunks
    assert calls == [4]  # the four new texts, not the eight already there
    index.delete(["d2", "d5"])
    keep = [i for i in range(12) if i not in (2, 5)]
    fresh = ChunkIndex.from_texts(tiny_qnet, [TEXTS[i] for i in keep], [IDS[i] for i in keep], [META[i] for i in keep],
                                  lexical=True)
    assert index.ids == fresh.ids and index.texts == fresh.texts and index.metadatas == fresh.metadatas
    torch.testing.assert_close(index.vectors, fresh.vectors, rtol=1e-5, atol=1e-6)
    assert index.lexical is not None and fresh.lexical is not None
    assert torch.equal(index.lexical.scores(QUESTIONS), fresh.lexical.scores(QUESTIONS))  # BM25 as a fresh build's
    for weight in (0.0, 0.5):
        assert (ranking(MultiHopSearcher(tiny_qnet, index), k=4, lexical_weight=weight)
                == ranking(MultiHopSearcher(tiny_qnet, fresh), k=4, lexical_weight=weight))


def test_add_and_delete_refuse_what_they_cannot_do_and_change_nothing(searcher: MultiHopSearcher,
                                                                     tiny_qnet: QNetwork) -> None:
    index = searcher.index
    assert index is not None
    with pytest.raises(ValueError, match=r"ids \['d3'\] are already in this index"):
        index.add(tiny_qnet, ["new text"], ["d3"])
    with pytest.raises(ValueError, match=r"ids \['nope'\] are not in this index of 12 chunks; nothing was deleted"):
        index.delete(["d1", "nope"])
    with pytest.raises(ValueError, match="cannot delete every chunk"):
        index.delete(IDS)
    assert index.ids == IDS and len(index.vectors) == 12
    other = QNetwork.from_encoder(tiny_qnet.config.encoder, scale=3.0)
    other.chunk_tower.encoder.embeddings.word_embeddings.weight.data += 1.0
    with pytest.raises(ValueError, match="not the one the index was embedded with"):
        index.add(other, ["new text"])
    assert len(index.add(tiny_qnet, ["new text"])[0]) == 32  # a new random id


def test_an_ordered_index_appends_in_reading_order_and_deleting_closes_the_gap(tiny_qnet: QNetwork) -> None:
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS[:6], IDS[:6], ordered=True)
    index.add(tiny_qnet, TEXTS[6:8], IDS[6:8])
    index.delete(["d1"])
    assert [index.chunk(r).position for r in range(len(index))] == list(range(7))
    assert index.ids == ["d0", "d2", "d3", "d4", "d5", "d6", "d7"]


def test_the_score_threshold_drops_what_scores_below_it(searcher: MultiHopSearcher) -> None:
    full = searcher.search(QUESTIONS, k=6)
    cut = sorted(h.score for r in full for h in r.hits)[len(QUESTIONS) * 3]  # the median score
    kept = searcher.search(QUESTIONS, k=6, score_threshold=cut)
    for a, b in zip(full, kept, strict=True):
        assert [h.chunk.id for h in b.hits] == [h.chunk.id for h in a.hits if h.score >= cut]  # hop order kept
    assert ranking(searcher, k=6, score_threshold=1e9) == [[], []]  # possibly none
    with pytest.raises(ValueError, match="score_threshold must be a finite number"):
        searcher.search(QUESTIONS, score_threshold="high")


def test_a_changed_index_saves_and_loads_with_its_changes(searcher: MultiHopSearcher, tiny_qnet: QNetwork,
                                                          tmp_path: Path) -> None:
    index = searcher.index
    assert index is not None
    index.add(tiny_qnet, ["Mary went to the hallway."], ["new"], [{"who": "Mary", "n": 12}])
    index.delete(["d0"])
    before = ranking(searcher, k=4, filter={"who": "Mary"})
    searcher.save(tmp_path / "s")
    loaded = MultiHopSearcher.load(tmp_path / "s")
    assert loaded.index is not None and loaded.index.ids == index.ids and loaded.index.metadatas == index.metadatas
    assert ranking(loaded, k=4, filter={"who": "Mary"}) == before
