"""Reads beside writes: a search reads one version of the index from its first hop to its last, while other threads
add and delete; versions cost what they add; filter masks are bounded."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from qrag.training.model.qnet import QNetwork
from qrag.training.search.filters import Filter
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher

WHO = ("Mary", "John", "Sandra", "Daniel")
TEXTS = [f"{who} {verb} the {what} in room {i}." for i, (who, (verb, what)) in enumerate(
    (w, p) for w in WHO for p in (("took", "milk"), ("dropped", "apple"), ("went to", "garden"), ("left", "box")))]
META = [{"tenant": t.split()[0], "n": i} for i, t in enumerate(TEXTS)]
IDS = [f"d{i}" for i in range(len(TEXTS))]


def test_a_snapshot_keeps_its_version_while_the_index_changes(tiny_qnet: QNetwork) -> None:
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS[:8], IDS[:8], META[:8], lexical=True)
    before = index.snapshot()
    vectors = before.vectors.clone()
    scores = before.lexical.scores(["milk apple"]).clone()  # type: ignore[union-attr]
    index.add(tiny_qnet, TEXTS[8:], IDS[8:], META[8:])
    index.delete(["d0", "d9"])
    assert len(before) == 8 and before.ids == IDS[:8] and before.texts == TEXTS[:8]
    assert torch.equal(before.vectors, vectors)  # the adds wrote past its rows, the delete into a new buffer
    assert torch.equal(before.lexical.scores(["milk apple"]), scores)  # type: ignore[union-attr]
    assert "d9" not in before and "d0" in before and before.rows(["d7"]) == [7]
    with pytest.raises(KeyError, match="d9"):
        before.rows(["d9"])
    assert len(index) == 14 and "d0" not in index and index.rows(["d15"]) == [13]
    with pytest.raises(ValueError, match="snapshot"):
        before.add(tiny_qnet, ["x"])
    with pytest.raises(ValueError, match="snapshot"):
        before.delete(["d1"])


def test_adds_reuse_the_buffer_and_equal_a_fresh_build(tiny_qnet: QNetwork) -> None:
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS[:4], IDS[:4], META[:4])
    index.add(tiny_qnet, TEXTS[4:5], IDS[4:5], META[4:5])  # the first add makes room (doubles)
    storage = index._version.storage
    for i in range(5, len(TEXTS)):
        index.add(tiny_qnet, [TEXTS[i]], [IDS[i]], [META[i]])
    assert index._version.storage.data_ptr() == storage.data_ptr()  # 11 single adds, no copy of the rows
    fresh = ChunkIndex.from_texts(tiny_qnet, TEXTS, IDS, META)
    torch.testing.assert_close(index.vectors, fresh.vectors, rtol=1e-5, atol=1e-6)
    assert index.ids == fresh.ids and index.metadatas == fresh.metadatas


def test_add_vectors_takes_vectors_already_computed_and_checks_them(tiny_qnet: QNetwork) -> None:
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS[:4], IDS[:4])
    vectors = tiny_qnet.embed_chunks(TEXTS[4:6])
    assert index.add_vectors(vectors, TEXTS[4:6], IDS[4:6]) == IDS[4:6]
    torch.testing.assert_close(index.vectors, ChunkIndex.from_texts(tiny_qnet, TEXTS[:6]).vectors, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"\(N, 32\) vectors for N=1"):
        index.add_vectors(torch.zeros(1, 7), ["x"], ["new"])
    with pytest.raises(ValueError, match="NaN"):
        index.add_vectors(torch.full((1, 32), float("nan")), ["x"], ["new"])
    with pytest.raises(ValueError, match="already in this index"):
        index.add_vectors(torch.zeros(1, 32), ["x"], ["d1"])
    assert len(index) == 6  # nothing refused was added


def test_a_faiss_index_is_built_by_the_search_that_needs_it_not_by_every_change(tiny_qnet: QNetwork) -> None:
    pytest.importorskip("faiss")
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS[:8], IDS[:8], backend="faiss")
    for i in range(8, 12):
        index.add(tiny_qnet, [TEXTS[i]], [IDS[i]])
    index.delete(["d3"])
    assert index._version.faiss.index is None  # no change built one
    states = tiny_qnet.embed_states(["Where is the milk?"], [[]])
    exact = ChunkIndex.from_texts(tiny_qnet, [t for t, i in zip(TEXTS[:12], IDS, strict=False) if i != "d3"],
                                  [i for i in IDS[:12] if i != "d3"])
    assert [[c.id for c, _ in r] for r in index.search(states, k=4)] == [[c.id for c, _ in r]
                                                                          for r in exact.search(states, k=4)]
    assert index._version.faiss.index is not None and index._version.faiss.index.ntotal == 11


def test_the_mask_cache_is_bounded_and_keyed_canonically(tiny_qnet: QNetwork) -> None:
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS, IDS, META, mask_cache_size=8)
    for i in range(50):
        index.mask(Filter.coerce({"n": i}))  # type: ignore[arg-type]
    assert len(index._version.masks) == 8
    a = index.mask(Filter.coerce({"tenant": "Mary", "n": 1}))  # type: ignore[arg-type]
    b = index.mask(Filter.coerce({"n": 1, "tenant": "Mary"}))  # type: ignore[arg-type]
    assert a is b  # one entry for one filter, whatever the dict's order
    index.add(tiny_qnet, ["Bill took the cup."], ["new"], [{"tenant": "Mary", "n": 1}])
    assert len(index._version.masks) == 8  # a new version starts with the masks of the one before (carried)
    assert index.mask(Filter.coerce({"n": 1, "tenant": "Mary"})).tolist() == [i in (1, 16) for i in range(17)]  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mask_cache_size"):
        ChunkIndex.from_texts(tiny_qnet, TEXTS[:2], mask_cache_size=-1)


def _churn(index: ChunkIndex, model: QNetwork, deleted: dict[str, float], stop: threading.Event,
           errors: list[BaseException], pause: float) -> None:
    """Add a chunk of a random tenant and delete an older added one, over and over; record when each delete returned."""
    added: list[str] = []
    i = 0
    try:
        while not stop.is_set():
            cid = f"new{i}"
            index.add(model, [f"{WHO[i % 4]} carried the milk to room {i}."], [cid], [{"tenant": WHO[i % 4], "n": 100 + i}])
            added.append(cid)
            if len(added) > 3:
                gone = added.pop(0)
                index.delete([gone])
                deleted[gone] = time.monotonic()
            i += 1
            time.sleep(pause)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)


@pytest.mark.parametrize(("opts", "pause"), [({"k": 4}, 0.0), ({"k": 4, "lexical_weight": 0.5}, 0.005),
                                             ({"k": 3, "beam_size": 2}, 0.0), ({"k": None, "stop_threshold": -1e9}, 0.0)])
def test_searches_beside_adds_and_deletes_stay_inside_the_filter_and_never_see_a_deleted_chunk(
        tiny_qnet: QNetwork, opts: dict, pause: float) -> None:  # type: ignore[type-arg]
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS, IDS, META)
    searcher = MultiHopSearcher(tiny_qnet, index)
    deleted: dict[str, float] = {}
    stop, errors = threading.Event(), []  # type: ignore[var-annotated]
    writer = threading.Thread(target=_churn, args=(index, tiny_qnet, deleted, stop, errors, pause))
    writer.start()
    seen = 0
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            started = time.monotonic()
            gone_before = {cid for cid, t in deleted.items() if t < started}
            for result in searcher.search(["Where is the milk?", "Who went to the garden?"], filter={"tenant": "Mary"},
                                          **opts):
                for hit in result.hits:
                    assert hit.chunk.metadata["tenant"] == "Mary", hit
                    assert hit.chunk.id not in gone_before, hit
                    seen += 1
    finally:
        stop.set()
        writer.join()
    assert not errors, errors
    assert seen > 0 and len(deleted) > 3  # the writer and the reader both ran
