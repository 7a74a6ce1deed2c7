"""What one version of a living index hands out and carries to the next: returned metadata is the caller's own copy,
filter masks carry across adds and deletes (evaluated on the new rows only), windows grow in a buffer, an empty
delete changes nothing, FAISS follows the changes, and two writers of one id cannot both succeed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from qrag.training.search.filters import Filter
from qrag.training.search.index import ChunkIndex
from qrag.training.search.windows import Windows

D = 8
TENANTS = ("acme", "bolt", "corp")


def _vectors(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, D, generator=g), dim=1)  # (n, D)


def _meta(i: int) -> dict[str, Any]:
    return {"tenant": TENANTS[i % 3], "n": i, "tags": ["even" if i % 2 == 0 else "odd"], "info": {"year": 2000 + i}}


def _index(n: int = 12, **kw: Any) -> ChunkIndex:
    return ChunkIndex(_vectors(n, 0), [f"passage {i}" for i in range(n)], [f"d{i}" for i in range(n)],
                      [_meta(i) for i in range(n)], **kw)


# ---------------------------------------------------------------- returned metadata is a copy
def test_a_returned_chunk_cannot_change_the_stored_one_a_mask_or_the_next_save(tmp_path: Path) -> None:
    index = _index()
    where = Filter.from_dict({"n": {"$gte": 0}})
    before = index.mask(where).clone()
    chunk = index.chunk(0)
    chunk.metadata["tags"].append("edited")  # type: ignore[index]
    chunk.metadata["info"]["year"] = 1  # type: ignore[index]
    chunk.metadata["tenant"] = "evil"  # type: ignore[index]
    hit = index.search(_vectors(1, 0), k=1)[0][0][0]
    hit.metadata["tags"].append("edited")  # type: ignore[index]
    row = index.metadatas[0]
    row["tags"].append("edited")
    next(iter(index.metadatas))["tags"].append("edited")
    index.metadatas[0:1][0]["tags"].append("edited")
    assert index.chunk(0).metadata == _meta(0)
    assert list(index.metadatas) == [_meta(i) for i in range(12)]
    assert torch.equal(index.mask(Filter.from_dict({"tenant": "evil"})), torch.zeros(12, dtype=torch.bool))
    assert torch.equal(index.mask(where), before)
    index.save(tmp_path / "ix")
    assert list(ChunkIndex.load(tmp_path / "ix").metadatas) == [_meta(i) for i in range(12)]


def test_the_callers_own_metadata_is_copied_in_so_editing_it_later_changes_nothing() -> None:
    metas = [_meta(i) for i in range(12)]
    index = ChunkIndex(_vectors(12, 0), [f"passage {i}" for i in range(12)], metadatas=metas)
    extra = [{"tags": ["new"]}]
    index.add_vectors(_vectors(1, 5), ["more"], ["x"], extra)
    metas[0]["tags"].append("edited")
    extra[0]["tags"].append("edited")
    assert index.chunk(0).metadata["tags"] == ["even"] and index.chunk(12).metadata["tags"] == ["new"]


# ---------------------------------------------------------------- masks carry across versions
FILTERS = [{"tenant": "acme"}, {"n": {"$gt": 7}}, {"$or": [{"tenant": "bolt"}, {"n": {"$lt": 3}}]},
           {"tenant": {"$nin": ["acme"]}}, lambda m: m["n"] % 4 == 1]


def _fresh_mask(index: ChunkIndex, spec: Any) -> torch.Tensor:
    """The mask computed from scratch over the index's metadata, as a new index of them would."""
    v = index.snapshot()
    return ChunkIndex(v.vectors, list(v.texts), list(v.ids), list(v.metadatas)).mask(Filter.coerce(spec))  # type: ignore[arg-type]


def test_masks_carried_across_adds_and_deletes_equal_fresh_ones() -> None:
    index = _index()
    for spec in FILTERS:
        index.mask(Filter.coerce(spec))  # type: ignore[arg-type]
    steps: list[tuple[str, Any]] = [("add", 3), ("delete", ["d0", "d5", "d13"]), ("add", 1), ("add", 4),
                                    ("delete", ["d1"]), ("delete", ["d14", "d2"]), ("add", 2)]
    added = 12
    for kind, what in steps:
        if kind == "add":
            index.add_vectors(_vectors(what, added), [f"passage {added + i}" for i in range(what)],
                              [f"d{added + i}" for i in range(what)], [_meta(added + i) for i in range(what)])
            added += what
        else:
            index.delete(what)
        for spec in FILTERS:
            got = index.mask(Filter.coerce(spec))  # type: ignore[arg-type]
            assert torch.equal(got, _fresh_mask(index, spec)), (kind, what, spec)


def test_a_mask_after_an_add_evaluates_the_filter_on_the_new_rows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    index = _index(40)
    where = Filter.from_dict({"tenant": "acme", "n": {"$gt": 2}})
    seen: list[int] = []
    matches = Filter.matches
    monkeypatch.setattr(Filter, "matches", lambda self, m: seen.append(m["n"]) or matches(self, m))
    index.mask(where)
    assert len(seen) == 40
    seen.clear()
    index.add_vectors(_vectors(2, 9), ["a", "b"], ["x40", "x41"], [_meta(40), _meta(41)])
    index.delete(["d3", "d4"])
    index.add_vectors(_vectors(1, 10), ["c"], ["x42"], [_meta(42)])
    got = index.mask(where)
    assert sorted(seen) == [40, 41, 42]  # the three new rows; none of the 38 kept from before
    assert torch.equal(got, _fresh_mask(index, {"tenant": "acme", "n": {"$gt": 2}}))
    seen.clear()
    assert index.mask(where) is got and seen == []  # cached in the new version
    buffer = got.data_ptr()
    for i in range(43, 50):
        index.add_vectors(_vectors(1, i), [f"t{i}"], [f"x{i}"], [_meta(i)])
        assert index.mask(where).data_ptr() == buffer  # the added rows' bits go into the mask's spare room
    assert sorted(seen) == list(range(43, 50))
    assert torch.equal(index.mask(where), _fresh_mask(index, {"tenant": "acme", "n": {"$gt": 2}}))
    snapshot, got = index.snapshot(), index.mask(where).clone()
    index.with_metadatas([{"tenant": "acme", "n": 99}] * len(index))
    assert bool(index.mask(where).all()) and torch.equal(snapshot.mask(where), got)  # new metadata: a new mask


def test_an_old_snapshots_masks_stay_its_own_after_adds_and_deletes() -> None:
    index = _index()
    where = Filter.from_dict({"tenant": "acme"})
    old = index.snapshot()
    old_mask = old.mask(where).clone()
    index.add_vectors(_vectors(2, 3), ["a", "b"], ["x", "y"], [{"tenant": "acme"}, {"tenant": "bolt"}])
    index.delete(["d0"])
    assert index.mask(where).tolist() == [i % 3 == 0 for i in range(1, 12)] + [True, False]
    assert torch.equal(old.mask(where), old_mask) and len(old.mask(where)) == 12


def test_a_function_filter_is_evaluated_at_each_search_and_never_cached() -> None:
    index = _index()
    calls: list[int] = []
    pred = Filter.coerce(lambda m: calls.append(1) or m["n"] < 5)
    assert pred is not None
    index.mask(pred)
    index.add_vectors(_vectors(1, 2), ["a"], ["x"], [{"n": 1}])
    assert index.mask(pred).tolist() == [i < 5 for i in range(12)] + [True]
    assert len(calls) == 12 + 13


# ---------------------------------------------------------------- smaller costs
def _windows(owners: list[int], seed: int) -> Windows:
    return Windows(_vectors(len(owners), seed), torch.tensor(owners, dtype=torch.long))


def test_windows_grow_in_a_buffer_and_an_old_snapshot_keeps_its_own() -> None:
    index = _index(6, windows=_windows([1, 1, 4], 1))
    index.add_vectors(_vectors(1, 2), ["long one"], ["w0"], windows=_windows([0, 0], 3))  # the first add makes room
    buffer = index.windows.vectors.data_ptr()  # type: ignore[union-attr]
    old = index.snapshot()
    old_windows = old.windows.vectors.clone()  # type: ignore[union-attr]
    for i in range(1, 9):
        index.add_vectors(_vectors(1, 10 + i), [f"long {i}"], [f"w{i}"], windows=_windows([0, 0, 0], 20 + i))
    got = index.windows
    assert got is not None and got.vectors.data_ptr() == buffer  # eight long adds, no copy of the windows
    assert len(got) == 5 + 24 and got.owner.tolist() == [1, 1, 4, 6, 6] + [r for r in range(7, 15) for _ in range(3)]
    assert torch.equal(got.vectors[5:8], _vectors(3, 21))
    assert old.windows is not None and torch.equal(old.windows.vectors, old_windows) and len(old.windows) == 5
    scores = index.topk(_vectors(1, 0), 14)[0]
    assert scores.shape == (1, 14)


def test_windows_appended_to_an_older_one_do_not_overwrite_the_newer() -> None:
    base = _windows([0, 1], 1).appended(_windows([0], 2), 2)
    newer = base.appended(_windows([0], 3), 3)
    other = base.appended(_windows([0], 4), 3)  # the same base, another continuation: must not write over `newer`
    assert torch.equal(newer.vectors[-1], _vectors(1, 3)[0]) and torch.equal(other.vectors[-1], _vectors(1, 4)[0])


def test_deleting_no_ids_changes_nothing_and_copies_nothing() -> None:
    index = _index()
    where = Filter.from_dict({"tenant": "acme"})
    mask = index.mask(where)
    version = index._version
    index.delete([])
    assert index._version is version and index.mask(where) is mask


def _race_one_id(index: ChunkIndex) -> list[str]:
    """Two threads add a chunk under one id at once; what each got."""
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def add(seed: int) -> None:
        start.wait()
        try:
            index.add_vectors(_vectors(1, seed), [f"text {seed}"], ["same"])
            outcomes.append("added")
        except ValueError as e:
            outcomes.append(str(e))

    threads = [threading.Thread(target=add, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(outcomes)


def test_two_threads_adding_one_id_cannot_both_succeed() -> None:
    for _ in range(20):
        index = _index()
        outcomes = _race_one_id(index)
        assert outcomes[0] == "added" and "already in this index" in outcomes[1]
        assert len(index) == 13 and list(index.ids).count("same") == 1


def test_faiss_answers_as_torch_before_and_after_adds_and_deletes_and_old_snapshots_keep_theirs() -> None:
    pytest.importorskip("faiss")
    faiss_ix, torch_ix = _index(backend="faiss"), _index()
    queries = _vectors(3, 7)

    def same() -> None:
        got = [[(c.id, round(s, 5)) for c, s in r] for r in faiss_ix.search(queries, k=5, exclude=[{"d1"}, set(), set()])]
        want = [[(c.id, round(s, 5)) for c, s in r] for r in torch_ix.search(queries, k=5, exclude=[{"d1"}, set(), set()])]
        assert got == want

    same()
    built = faiss_ix._version.faiss
    old = faiss_ix.snapshot()
    old_hits = [[c.id for c, _ in r] for r in old.search(queries, k=5)]
    for i in range(3):
        vectors = queries[i : i + 1] * 2  # a new best chunk for query i
        for ix in (faiss_ix, torch_ix):
            ix.add_vectors(vectors, [f"new {i}"], [f"new{i}"])
        same()
    assert faiss_ix._version.faiss is built  # the adds extended the FAISS index; none rebuilt it
    assert [[c.id for c, _ in r] for r in old.search(queries, k=5)] == old_hits  # the old version: its rows only
    for ix in (faiss_ix, torch_ix):
        ix.delete(["new1", "d4"])
    same()
    assert [r[0][0].id for r in faiss_ix.search(queries, k=1)][::2] == ["new0", "new2"]
