"""ChunkIndex: exact search against a brute-force loop, masking, FAISS, persistence, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from qrag.training.search.index import ChunkIndex, ChunkStore, IndexLoadError

TEXTS = [f"Sentence number {i} talks about topic {i % 3} and item {i * 7}." for i in range(12)]


def _random_index(n: int = 20, d: int = 8, seed: int = 0, backend: str = "torch") -> ChunkIndex:
    g = torch.Generator().manual_seed(seed)
    vectors = torch.randn(n, d, generator=g)  # (N, D)
    return ChunkIndex(vectors, [f"t{i}" for i in range(n)], backend=backend)  # type: ignore[arg-type]


def test_exact_search_matches_brute_force_loop() -> None:
    index = _random_index()
    queries = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))  # (B, D)
    hits = index.search(queries, k=5)
    for b in range(3):
        brute = sorted(
            ((float(sum(queries[b, j] * index.vectors[i, j] for j in range(8))), str(i)) for i in range(20)),
            reverse=True,
        )[:5]
        assert [c.id for c, _ in hits[b]] == [i for _, i in brute]
        assert [s for _, s in hits[b]] == pytest.approx([s for s, _ in brute], abs=1e-5)


def test_excluded_ids_never_come_back_and_k_is_capped() -> None:
    index = _random_index(n=6)
    queries = torch.randn(2, 8)  # (B, D)
    hits = index.search(queries, k=10, exclude=[{"0", "3"}, set()])
    assert len(hits[0]) == 4 and {c.id for c, _ in hits[0]}.isdisjoint({"0", "3"})
    assert sorted(c.id for c, _ in hits[1]) == [str(i) for i in range(6)]


def test_faiss_backend_equals_torch() -> None:
    pytest.importorskip("faiss")
    exact, fa = _random_index(n=50), _random_index(n=50, backend="faiss")
    queries = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))  # (B, D)
    exclude = [{"1", "2"}, set(), {"7"}, {str(i) for i in range(10)}]
    a, b = exact.search(queries, 6, exclude), fa.search(queries, 6, exclude)
    assert [[c.id for c, _ in r] for r in a] == [[c.id for c, _ in r] for r in b]
    assert [s for r in a for _, s in r] == pytest.approx([s for r in b for _, s in r], abs=1e-4)


def test_from_texts_embeds_once_with_chunk_tower(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS, metadatas=[{"i": i} for i in range(12)])
    assert isinstance(index, ChunkStore)
    assert index.vectors.shape == (12, tiny_qnet.dim)
    torch.testing.assert_close(index.vectors, tiny_qnet.embed_chunks(TEXTS))
    assert index.chunk(4).metadata == {"i": 4} and index.chunk(4).position == 4


@pytest.mark.usefixtures("bf16_as_native")
def test_bf16_indexing_is_close_to_fp32_and_bad_precisions_are_named(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    texts = ["Mary went to the kitchen.", "John took the apple there.", "The milk is in the fridge."]
    exact = ChunkIndex.from_texts(tiny_qnet, texts)
    fast = ChunkIndex.from_texts(tiny_qnet, texts, precision="bf16")
    assert fast.vectors.dtype == torch.float32  # stored and scored in fp32 whatever the encoder ran in
    cos = torch.nn.functional.cosine_similarity(fast.vectors, exact.vectors)
    assert float(cos.min()) > 0.99 and not torch.equal(fast.vectors, exact.vectors)
    with pytest.raises(ValueError, match="precision must be 'fp32', 'bf16', 'fp16', 'int8' or 'auto', got 'int4'"):
        ChunkIndex.from_texts(tiny_qnet, texts, precision="int4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'int8' is a serving precision"):
        ChunkIndex.from_texts(tiny_qnet, texts, precision="int8")
    with pytest.raises(ValueError, match="'fp16' needs a GPU"):
        ChunkIndex.from_texts(tiny_qnet, texts, precision="fp16")


@pytest.mark.parametrize("fmt", ["safetensors", "numpy"])
def test_save_load_round_trip(tmp_path: Path, fmt: str) -> None:
    index = ChunkIndex(torch.randn(5, 4), ["a", "b", "c", "d", "é"], ids=list("vwxyz"), metadatas=[{"n": i} for i in range(5)])
    folder = index.save(tmp_path / "idx", vector_format=fmt)  # type: ignore[arg-type]
    loaded = ChunkIndex.load(folder)
    torch.testing.assert_close(loaded.vectors, index.vectors, rtol=0, atol=0)
    assert (loaded.texts, loaded.ids, loaded.metadatas) == (index.texts, index.ids, index.metadatas)
    q = torch.randn(2, 4)  # (B, D)
    assert loaded.search(q, 3) == index.search(q, 3)
    assert not list(tmp_path.glob("*.pkl")) and not list(tmp_path.glob("**/*.pkl"))


def test_load_rejects_missing_and_corrupt_folders(tmp_path: Path) -> None:
    with pytest.raises(IndexLoadError, match="index.json is missing"):
        ChunkIndex.load(tmp_path / "nowhere")
    folder = ChunkIndex(torch.randn(3, 4), ["a", "b", "c"]).save(tmp_path / "idx")
    (folder / "index.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(IndexLoadError, match="corrupt"):
        ChunkIndex.load(folder)
    folder = ChunkIndex(torch.randn(3, 4), ["a", "b", "c"]).save(tmp_path / "idx2")
    head = json.loads((folder / "index.json").read_text())
    head["texts"] = ["a"]
    (folder / "index.json").write_text(json.dumps(head))
    with pytest.raises(IndexLoadError, match="inconsistent"):
        ChunkIndex.load(folder)
    (folder / "vectors.safetensors").write_bytes(b"garbage")
    with pytest.raises(IndexLoadError, match="corrupt"):
        ChunkIndex.load(folder)


def test_bad_corpus_input_gets_clear_errors() -> None:
    v = torch.randn(2, 4)
    with pytest.raises(ValueError, match="empty corpus"):
        ChunkIndex(torch.randn(0, 4), [])
    with pytest.raises(ValueError, match=r"texts\[1\] must be a str, got int"):
        ChunkIndex(v, ["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unique"):
        ChunkIndex(v, ["a", "b"], ids=["x", "x"])
    with pytest.raises(ValueError, match="2 texts"):
        ChunkIndex(v, ["a", "b"], metadatas=[{}])
    with pytest.raises(ValueError, match="single string"):
        ChunkIndex(v, "ab")
    with pytest.raises(ValueError, match=r"metadatas\[1\]\['f'\] is a object, which JSON cannot hold"):
        ChunkIndex(v, ["a", "b"], metadatas=[{}, {"f": object()}])  # refused before anything is built or saved


def test_chunk_vector_cache_embeds_each_text_once_and_survives_a_round_trip(tiny_encoder_path: Path,
                                                                           tmp_path: Path) -> None:
    from qrag.training.model.qnet import QNetwork
    from qrag.training.search.chunk_vectors import ChunkVectorCache

    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    calls: list[list[str]] = []
    embed = qnet.embed_chunks
    qnet.embed_chunks = lambda texts, **kw: (calls.append(list(texts)), embed(texts, **kw))[1]  # type: ignore[method-assign]
    cache = ChunkVectorCache(qnet.chunk_vectors_key())
    first = cache.vectors(qnet, TEXTS[:5] + TEXTS[:2])  # a repeated text inside one call is embedded once
    second = cache.vectors(qnet, TEXTS[3:8])
    assert calls == [TEXTS[:5], TEXTS[5:8]]
    torch.testing.assert_close(first, embed(TEXTS[:5] + TEXTS[:2]))
    torch.testing.assert_close(second, embed(TEXTS[3:8]))

    cache.save(tmp_path / "cache")
    loaded = ChunkVectorCache.load(tmp_path / "cache", qnet.chunk_vectors_key())
    assert len(loaded) == 8 and TEXTS[7] in loaded and TEXTS[9] not in loaded
    torch.testing.assert_close(loaded.vectors(qnet, TEXTS[:8]), embed(TEXTS[:8]))
    assert len(calls) == 2  # everything came from the file
    # Wrong tower, missing or corrupt files: clear errors that say the cache is rebuilt when deleted.
    with pytest.raises(IndexLoadError, match="holds vectors of"):
        ChunkVectorCache.load(tmp_path / "cache", "base:other")
    with pytest.raises(ValueError, match="one cache per chunk tower"):
        ChunkVectorCache("base:other").vectors(qnet, TEXTS[:1])
    with pytest.raises(IndexLoadError, match="not a chunk-vector cache"):
        ChunkVectorCache.load(tmp_path / "nowhere", qnet.chunk_vectors_key())
    (tmp_path / "cache" / ChunkVectorCache.TEXTS_FILE).write_text('["only one"]', encoding="utf-8")
    with pytest.raises(IndexLoadError, match="does not match the vectors"):
        ChunkVectorCache.load(tmp_path / "cache", qnet.chunk_vectors_key())
    (tmp_path / "cache" / ChunkVectorCache.VECTORS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(IndexLoadError, match="cannot be read"):
        ChunkVectorCache.load(tmp_path / "cache", qnet.chunk_vectors_key())
    small = ChunkVectorCache(qnet.chunk_vectors_key(), max_texts=4)
    small.vectors(qnet, TEXTS[:3])
    torch.testing.assert_close(small.vectors(qnet, TEXTS[5:9]), embed(TEXTS[5:9]))  # past the bound: afresh
    assert len(small) == 4


def test_chunk_vector_folder_keeps_one_cache_per_tower_between_runs(tiny_encoder_path: Path, tmp_path: Path) -> None:
    from qrag.training.model.qnet import QNetwork
    from qrag.training.search.chunk_vectors import ChunkVectorFolder

    frozen = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    scaled = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", scale=2.0)  # other vectors
    trainable = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="both")  # its key is this object's
    assert len({frozen.chunk_vectors_key(), scaled.chunk_vectors_key(), trainable.chunk_vectors_key()}) == 3
    folder = ChunkVectorFolder(tmp_path / "vectors")
    assert folder.save() == []  # nothing asked for, nothing written (and no folder created)
    assert not (tmp_path / "vectors").exists()
    folder.get(frozen.chunk_vectors_key()).vectors(frozen, TEXTS[:4])
    folder.get(scaled.chunk_vectors_key()).vectors(scaled, TEXTS[:2])
    folder.get(trainable.chunk_vectors_key()).vectors(trainable, TEXTS[:2])
    written = folder.save()  # a chunk tower that can train is not kept: its key means nothing to another run
    assert sorted(written) == sorted([folder.path(frozen.chunk_vectors_key()), folder.path(scaled.chunk_vectors_key())])
    assert sorted(p.name for p in (tmp_path / "vectors").iterdir()) == sorted(p.name for p in written)
    assert folder.save() == []  # unchanged since the save

    calls: list[list[str]] = []
    embed = frozen.embed_chunks
    frozen.embed_chunks = lambda texts, **kw: (calls.append(list(texts)), embed(texts, **kw))[1]  # type: ignore[method-assign]
    again = ChunkVectorFolder(tmp_path / "vectors")
    cache = again.get(frozen.chunk_vectors_key())
    assert len(cache) == 4 and again.get(frozen.chunk_vectors_key()) is cache
    torch.testing.assert_close(cache.vectors(frozen, TEXTS[2:6]), embed(TEXTS[2:6]))
    assert calls == [TEXTS[4:6]]  # only the two new texts were embedded
    assert again.save() == [again.path(frozen.chunk_vectors_key())]  # the grown cache only
    assert len(ChunkVectorFolder(tmp_path / "vectors").get(frozen.chunk_vectors_key())) == 6

    with pytest.raises(ValueError, match="is a file; pass a folder"):
        ChunkVectorFolder(tmp_path / "vectors" / folder.path(frozen.chunk_vectors_key()).name / "texts.json")
    folder.path(scaled.chunk_vectors_key()).joinpath("texts.json").write_text("[", encoding="utf-8")
    with pytest.raises(IndexLoadError, match="cannot be read.*delete it"):
        ChunkVectorFolder(tmp_path / "vectors").get(scaled.chunk_vectors_key())
