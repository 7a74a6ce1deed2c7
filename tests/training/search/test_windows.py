"""Long chunks scored by their best window: the window rows, the windows' bookkeeping in a living index, the scores
of every search path, persistence, and real text where the answer lies past what the chunk tower reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qrag.training.data.hotpot_pool import read_rows
from qrag.training.model.qnet import QNetwork
from qrag.training.model.towers import token_rows, window_rows
from qrag.training.search.hops import Corpora, q_values
from qrag.training.search.index import ChunkIndex, IndexLoadError
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, search_many
from qrag.training.search.settings import SearchError
from qrag.training.search.windows import Windows, best_window_scores

LONG = " ".join(f"w{i}" for i in range(20))  # tiny tokenizer: how many ids, checked below
SHORT = ["Mary went to the kitchen.", "Mary took the milk.", "John is in the garden."]


# ---------------------------------------------------------------------- the rows
def test_window_rows_start_half_a_window_apart_and_end_at_the_text(minilm_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(minilm_path), max_chunk_tokens=8)
    tok = qnet.tokenizer
    text = " ".join(["river"] * 20)  # 20 ids, one per word
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 20
    cls, sep = tok.cls_token_id, tok.sep_token_id
    rows, owner = window_rows(tok, [SHORT[0], text, "a b c d e f g"], 8)  # body 6, stride 3
    # first window (the cut row) is not repeated: later windows start at 3, 6, 9, 12 and one ends at the end (14)
    assert owner == [1, 1, 1, 1, 1, 2]
    assert rows[:5] == [[cls, *ids[s : s + 6], sep] for s in (3, 6, 9, 12, 14)]
    seven = tok("a b c d e f g", add_special_tokens=False)["input_ids"]
    assert rows[5] == [cls, *seven[1:7], sep]  # 7 ids: one more window, ending at the last
    assert token_rows(tok, [text], 8)[0] == [cls, *ids[:6], sep]  # the first window is the cut row
    assert window_rows(tok, [text], 8, stride=10)[0] == [[cls, *ids[s : s + 6], sep] for s in (10, 14)]
    with pytest.raises(ValueError, match="max_tokens above the 2 special tokens"):
        window_rows(tok, [text], 2)


# ---------------------------------------------------------------------- the bookkeeping
def test_best_window_scores_take_each_chunks_best_window() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.0, 5.0, -1.0]])  # (B=2, N=3) first windows
    window_scores = torch.tensor([[4.0, 0.5, 2.5], [1.0, 6.0, -2.0]])  # (B, W=3)
    owner = torch.tensor([0, 1, 1])
    got = best_window_scores(scores, window_scores, owner)
    assert got.tolist() == [[4.0, 2.5, 3.0], [1.0, 6.0, -1.0]]
    assert best_window_scores(scores, torch.empty(2, 0), torch.empty(0, dtype=torch.long)) is scores


def test_windows_kept_renumber_their_owners() -> None:
    w = Windows(torch.arange(8.0).reshape(4, 2), torch.tensor([0, 0, 2, 3]))
    kept = w.kept(torch.tensor([True, False, False, True]))  # rows 1, 2 deleted: row 3 becomes row 1
    assert kept.owner.tolist() == [0, 0, 1]
    assert kept.vectors.tolist() == [[0.0, 1.0], [2.0, 3.0], [6.0, 7.0]]
    both = kept.appended(Windows(torch.ones(1, 2), torch.tensor([0])), offset=2)
    assert both.owner.tolist() == [0, 0, 1, 2]
    with pytest.raises(ValueError, match="torch.long"):
        Windows(torch.ones(1, 2), torch.tensor([0.0]))


def test_topk_scores_a_chunk_by_its_best_window_and_still_masks_it() -> None:
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])  # (N=3, D=2)
    windows = Windows(torch.tensor([[3.0, 0.0], [0.0, -1.0]]), torch.tensor([1, 1]))
    index = ChunkIndex(vectors, ["a", "b", "c"], windows=windows)
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (B=2, D)
    top, rows = index.topk(q, 3)
    # query 0: chunk b's first window 0, its windows 3 and 0 → 3; query 1: b's 1, -1 → 1
    assert rows.tolist() == [[1, 0, 2], [1, 2, 0]]
    assert top.tolist() == [[3.0, 1.0, 0.5], [1.0, 0.5, 0.0]]
    top, rows = index.topk(q, 2, exclude=[{1}, set()], allowed=torch.tensor([True, True, False]))
    assert rows.tolist() == [[0, -1], [1, 0]]
    cut = ChunkIndex(vectors, ["a", "b", "c"])
    assert cut.topk(q, 1)[1].tolist() == [[0], [1]]
    with pytest.raises(ValueError, match="owners must be rows 0..2"):
        ChunkIndex(vectors, ["a", "b", "c"], windows=Windows(torch.ones(1, 2), torch.tensor([3])))
    with pytest.raises(ValueError, match=r"\(W, 2\)"):
        ChunkIndex(vectors, ["a", "b", "c"], windows=Windows(torch.ones(1, 3), torch.tensor([0])))
    with pytest.raises(ValueError, match="long_chunks must be one of"):
        ChunkIndex(vectors, ["a", "b", "c"], long_chunks="split")  # type: ignore[arg-type]


# ---------------------------------------------------------------------- a living index
@pytest.fixture()
def short_reader(tiny_encoder_path: Path) -> QNetwork:
    return QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=8)


def _same(a: ChunkIndex, b: ChunkIndex) -> None:
    assert list(a.texts) == list(b.texts)
    torch.testing.assert_close(a.vectors, b.vectors)
    assert a.windows is not None and b.windows is not None
    assert a.windows.owner.tolist() == b.windows.owner.tolist()
    torch.testing.assert_close(a.windows.vectors, b.windows.vectors)


def test_adds_and_deletes_keep_windows_equal_to_a_fresh_build(short_reader: QNetwork) -> None:
    texts = [SHORT[0], LONG, SHORT[1], LONG + " w99", SHORT[2]]
    ids = [str(i) for i in range(len(texts))]
    fresh = ChunkIndex.from_texts(short_reader, texts, ids)
    assert fresh.windows is not None and set(fresh.windows.owner.tolist()) == {1, 3}
    grown = ChunkIndex.from_texts(short_reader, texts[:2], ids[:2])
    grown.add(short_reader, texts[2:], ids[2:])
    _same(grown, fresh)
    grown.delete(["1"])  # the first long chunk: the second one's windows move up a row
    _same(grown, ChunkIndex.from_texts(short_reader, [t for i, t in enumerate(texts) if i != 1],
                                       [i for i in ids if i != "1"]))
    q = short_reader.embed_states(["w7 w8 w9"], [[]])
    assert grown.topk(q, 4)[1].tolist() == ChunkIndex.from_texts(
        short_reader, [t for i, t in enumerate(texts) if i != 1]).topk(q, 4)[1].tolist()
    cut = ChunkIndex.from_texts(short_reader, texts, long_chunks="cut")
    assert cut.windows is None and cut.long_chunks == "cut"
    cut.add(short_reader, [LONG], ["x"])
    assert cut.windows is None


def test_vectors_added_with_and_without_their_windows(short_reader: QNetwork) -> None:
    index = ChunkIndex.from_texts(short_reader, [LONG, SHORT[0]])
    assert index.windows is not None
    before = len(index.windows)
    index.add_vectors(short_reader.embed_chunks([SHORT[1]]), [SHORT[1]])
    assert index.windows is not None and len(index.windows) == before
    vectors, owner = short_reader.embed_windows([SHORT[2], LONG])
    index.add_vectors(short_reader.embed_chunks([SHORT[2], LONG]), [SHORT[2], LONG],
                      windows=Windows(vectors, owner))
    assert index.windows.owner.tolist() == [0] * before + [4] * before


@pytest.mark.parametrize("vector_format", ["safetensors", "numpy"])
def test_windows_save_and_load(short_reader: QNetwork, tmp_path: Path, vector_format: str) -> None:
    index = ChunkIndex.from_texts(short_reader, [SHORT[0], LONG, SHORT[1]])
    index.save(tmp_path / "ix", vector_format=vector_format)  # type: ignore[arg-type]
    back = ChunkIndex.load(tmp_path / "ix")
    _same(back, index)
    assert back.long_chunks == "windows"
    back.add(short_reader, [LONG + " w50"])
    assert back.windows is not None and len(back.windows) > len(index.windows or [])
    (tmp_path / "ix" / ("windows.safetensors" if vector_format == "safetensors" else "window_owner.npy")).unlink()
    with pytest.raises(IndexLoadError, match="window file .* is missing"):
        ChunkIndex.load(tmp_path / "ix")


# ---------------------------------------------------------------------- the search paths
def test_every_search_path_scores_the_best_window(short_reader: QNetwork) -> None:
    texts = [SHORT[0], LONG, SHORT[1], SHORT[2]]
    index = ChunkIndex.from_texts(short_reader, texts)
    assert index.windows is not None
    states = short_reader.embed_states(["w12 w13 w14 w15", "Mary"], [[], []])  # (2, D)
    got, _ = q_values(short_reader, states, Corpora.shared(index.vectors, texts, 2, windows=index.windows), [0, 1],
                      [[], [0]])
    whole = states @ index.vectors.T  # (2, N)
    best = torch.maximum(whole[:, 1], (states @ index.windows.vectors.T).max(dim=1).values)  # (2,)
    torch.testing.assert_close(got[:, 1], best)
    torch.testing.assert_close(got[0, [0, 2, 3]], whole[0, [0, 2, 3]])
    assert got[1, 0] == -torch.inf  # taken chunks stay masked
    # per-question corpora (search_many) equal one searcher per question
    cfg = SearchConfig(k=2, max_hops=2, stop_threshold=None, fill="state")
    others = ChunkIndex.from_texts(short_reader, [LONG + " w40 w41", SHORT[2]])
    many = search_many(short_reader, ["w12 w13 w14", "w40 w41"], [index, others], cfg)
    for result, q, ix in zip(many, ["w12 w13 w14", "w40 w41"], [index, others], strict=True):
        one = MultiHopSearcher(short_reader, ix, cfg).search_one(q)
        assert [h.chunk.id for h in result.hits] == [h.chunk.id for h in one.hits]
        assert [h.q_value for h in result.hits] == pytest.approx([h.q_value for h in one.hits])


def test_a_position_aware_model_reads_chunks_cut(tiny_encoder_path: Path) -> None:
    relative = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=8, position_mode="relative")
    with pytest.warns(UserWarning, match="max_chunk_tokens=8"):
        index = ChunkIndex.from_texts(relative, [SHORT[0], LONG], ordered=True)
    assert index.windows is None and index.long_chunks == "cut"
    plain = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=8)
    windowed = ChunkIndex.from_texts(plain, [SHORT[0], LONG], ordered=True)
    assert windowed.windows is not None
    MultiHopSearcher(relative, windowed, ordered=True).search_one("w3", k=2)  # windows left aside, no error
    corpora = Corpora.shared(windowed.vectors, list(windowed.texts), 1, windows=windowed.windows)
    absolute = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=8, position_mode="absolute")
    for model in (relative, absolute):
        with pytest.raises(SearchError, match="position_mode 'none'"):
            q_values(model, model.embed_states(["w3"], [[]]), corpora, [0], [[]])


# ---------------------------------------------------------------------- real text
def test_an_answer_past_what_the_tower_reads_is_found_by_its_window(minilm_path: Path) -> None:
    """HotpotQA passages (real text): a question's passage glued after 12 others, past the 256 tokens MiniLM's chunk
    tower reads, among 30 other passages. Cut, the long chunk is not the first result; by its windows it is."""
    rows = [r for r in read_rows() if r.clean][:60]
    model = QNetwork.from_encoder(str(minilm_path), train_towers="state")
    filler = " ".join(r.passages[0] for r in rows[20:32])
    assert len(model.tokenizer(filler)["input_ids"]) > model.config.max_chunk_tokens
    for t in (0, 1, 4):
        corpus = [f"{filler} {rows[t].passages[0]}"] + [r.passages[1] for r in rows[40:60]] + [
            r.passages[0] for r in rows[5:15]]
        states = model.embed_states([rows[t].question], [[]])
        windowed = ChunkIndex.from_texts(model, corpus)
        with pytest.warns(UserWarning, match="longer than this model's max_chunk_tokens"):
            cut = ChunkIndex.from_texts(model, corpus, long_chunks="cut")
        assert windowed.topk(states, 1)[1].item() == 0, rows[t].question
        assert cut.topk(states, 1)[1].item() != 0, rows[t].question
        hit = MultiHopSearcher(model, windowed).search_one(rows[t].question, k=1, max_hops=1).hits[0]
        assert hit.chunk.position == 0 and hit.chunk.text == corpus[0]  # one result: the whole passage
