"""Lexical evidence (METHOD.md §4.5): BM25 and its scaling hand-computed, reciprocal-rank fusion, hops ranked by
Q + w · evidence on a fake Q-network with known vectors (the stop rule still reading Q), the same hits on every
search path, and the BM25 index saved with a `ChunkIndex` (a damaged one refused by name)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from qrag.training.search import hops
from qrag.training.search.index import ChunkIndex, IndexLoadError
from qrag.training.search.lexical import (
    LexicalIndex,
    LexicalLoadError,
    lexical_evidence,
    reciprocal_rank_fusion,
)
from qrag.training.search.searcher import (
    Hit,
    LexicalFallbackWarning,
    MultiHopSearcher,
    SearchConfig,
    SearchError,
    search_many,
)
from qrag.training.search.settings import HopSettings
from tests.training.search.test_fill import GuardedFake, ListStore

# Lucene's BM25 (bm25s: k1 1.5, b 0.75). Every chunk has two words, so every tf component is
# tf / (k1 · (1 - b + b · dl / avgdl) + tf) = 1 / (1.5 + 1) = 0.4; idf = ln(1 + (N - df + 0.5) / (df + 0.5)), N = 3.
FARM = math.log(1 + 1.5 / 2.5) * 0.4  # 'farm': in two chunks
CHERRY = math.log(1 + 2.5 / 1.5) * 0.4  # 'cherry': in one


def test_bm25_scores_are_lucenes_hand_computed() -> None:
    index = LexicalIndex.from_texts(["apple farm", "banana farm", "cherry orchard"])
    scores = index.scores(["farm", "Cherry?", "the of", "zebra"])  # (4, 3)
    assert torch.allclose(scores, torch.tensor([[FARM, FARM, 0.0], [0.0, 0.0, CHERRY], [0.0] * 3, [0.0] * 3]), atol=1e-6)
    # A repeated query word counts twice; stop words and unknown words count nothing.
    assert torch.allclose(index.scores(["farm farm cherry the zebra"]), torch.tensor([[2 * FARM, 2 * FARM, CHERRY]]),
                          atol=1e-6)


def test_evidence_is_bm25_over_the_best_available_chunk() -> None:
    scores = torch.tensor([[2.0, 1.0, 4.0, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 6.0, 1.5, 3.0]])
    available = torch.tensor([[True, True, False, True], [True] * 4, [True, False, True, False]])
    # Row 0: the taken chunk (4) does not set the scale; row 1: nothing matches; row 2: 6 is unavailable, so 3 is best.
    want = torch.tensor([[1.0, 0.5, 0.0, 0.0], [0.0] * 4, [1.0, 0.0, 0.5, 0.0]])
    assert torch.equal(lexical_evidence(scores, available), want)


def test_reciprocal_rank_fusion_is_the_sum_of_weighted_reciprocal_ranks() -> None:
    bm25 = torch.tensor([3.0, 1.0, 2.0])  # ranks 1, 3, 2
    dense = torch.tensor([0.1, 0.9, 0.5])  # ranks 3, 1, 2
    fused = reciprocal_rank_fusion([bm25, dense])
    assert torch.allclose(fused, torch.tensor([1 / 61 + 1 / 63, 1 / 63 + 1 / 61, 2 / 62], dtype=torch.float64))
    assert torch.allclose(reciprocal_rank_fusion([bm25, dense], [1.0, 0.0], c=1),
                          torch.tensor([1 / 2, 1 / 4, 1 / 3], dtype=torch.float64))
    ties = reciprocal_rank_fusion([torch.tensor([0.0, 0.0, 1.0])], c=0)  # ties keep the items' order: ranks 2, 3, 1
    assert torch.allclose(ties, torch.tensor([1 / 2, 1 / 3, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="2 rankings and 1 weights"):
        reciprocal_rank_fusion([bm25, dense], [1.0])


# Four chunks with one-hot vectors. Q(()) = A .6, B .5, C .3, D 0; after C: A .5, B .3, D .7; after C, A: B .6, D .2;
# after A: B .8, C .1, D .2.
TEXTS = ["apple farm", "banana farm", "cherry orchard", "date palm"]
TABLE = {(): [0.6, 0.5, 0.3, 0.0], ("cherry orchard",): [0.5, 0.3, 0.0, 0.7],
         ("cherry orchard", "apple farm"): [0.0, 0.6, 0.0, 0.2], ("apple farm",): [0.0, 0.8, 0.1, 0.2]}
QUESTION = "Which cherry grows near the farm?"


def _lexical_fake(weight: float, threshold: float | None = None) -> tuple[GuardedFake, ChunkIndex]:
    model = GuardedFake({t: [float(i == j) for j in range(4)] for i, t in enumerate(TEXTS)},
                     lambda q, sel: TABLE.get(sel, [0.0] * 4))
    model.hop_settings = HopSettings(max_hops=3, stop_threshold=threshold, lexical_weight=weight)
    return model, ChunkIndex.from_texts(model, TEXTS, ids=list("ABCD"))  # type: ignore[arg-type]


def _hits(hits: list[Hit]) -> list[tuple[str, int, float, float, bool]]:
    return [(h.chunk.id, h.hop, round(h.q_value, 6), round(float(h.score or 0), 6), h.past_stop) for h in hits]


def test_hops_rank_by_q_plus_weighted_evidence_of_the_states_text() -> None:
    # Hop 1, text = the question: 'cherry' is in C only, 'farm' in A and B; every chunk has two words, so the ratio
    # of their scores is that of their idfs over N = 4: evidence A = B = ln(2) / ln(10/3) = 0.576, C = 1, and with
    # w = 1 C (0.3 + 1) passes A (0.6 + 0.576). Hop 2, text = question + C: C is
    # taken, so 'farm' decides among A, B, D: A = B = 1, D = 0; A (0.5 + 1) passes D (0.7). Hop 3, text =
    # question + C + A: B = 1 ('farm'), D = 0: B (0.6 + 1).
    model, index = _lexical_fake(weight=1.0)
    share = math.log(2) / math.log(10 / 3)
    hits = MultiHopSearcher(model, index).search_one(QUESTION, k=3).hits  # type: ignore[arg-type]
    assert _hits(hits) == [("C", 0, 0.3, 1.3, False), ("A", 1, 0.5, 1.5, False), ("B", 2, 0.6, 1.6, False)]
    # Without lexical evidence the Q-values alone choose: A (.6), then B (.8).
    plain = MultiHopSearcher(model, index).search_one(QUESTION, k=2, lexical_weight=0).hits  # type: ignore[arg-type]
    assert _hits(plain) == [("A", 0, 0.6, 0.6, False), ("B", 1, 0.8, 0.8, False)]
    # A small weight keeps A first at hop 1: 0.6 + 0.2 · share against 0.3 + 0.2.
    small = MultiHopSearcher(model, index).search_one(QUESTION, k=1, lexical_weight=0.2).hits  # type: ignore[arg-type]
    assert _hits(small) == [("A", 0, 0.6, round(0.6 + 0.2 * share, 6), False)]


def test_the_stop_rule_reads_the_q_value_not_the_score() -> None:
    # Adaptive search with threshold 0.55: hop 2 takes A (score 1.5, Q 0.5 < 0.55), so the rule stops before it.
    model, index = _lexical_fake(weight=1.0, threshold=0.55)
    result = MultiHopSearcher(model, index).search_one(QUESTION, k=None)  # type: ignore[arg-type]
    assert _hits(result.hits) == [("C", 0, 0.3, 1.3, False)] and result.hops_kept == 1


def test_beam_store_and_batched_paths_give_the_greedy_hits() -> None:
    model, index = _lexical_fake(weight=1.0)
    greedy = MultiHopSearcher(model, index).search_one(QUESTION, k=4).hits  # type: ignore[arg-type]
    assert [h.chunk.id for h in greedy] == ["C", "A", "B", "D"]
    beam1 = MultiHopSearcher(model, index, SearchConfig(beam_size=1, k=4))  # type: ignore[arg-type]
    assert _hits(beam1._search_group(index, [QUESTION], beam1.config.resolved(model.hop_settings), None, None)[0].hits) == _hits(greedy)
    many = search_many(model, [QUESTION, QUESTION], [index, index], SearchConfig(k=4))  # type: ignore[arg-type]
    assert all(_hits(r.hits) == _hits(greedy) for r in many)


def test_an_external_store_ranks_by_q_alone_and_says_so() -> None:
    model, index = _lexical_fake(weight=1.0)
    with pytest.warns(LexicalFallbackWarning, match="has no lexical search: it ranks by the Q-value alone"):
        searcher = MultiHopSearcher(model, ListStore(index))  # type: ignore[arg-type]
    hits = searcher.search_one(QUESTION, k=2).hits
    assert [h.chunk.id for h in hits] == ["A", "B"] and all(h.score == h.q_value for h in hits)


def test_a_corpus_without_its_bm25_index_is_named() -> None:
    model, index = _lexical_fake(weight=1.0)
    corpora = hops.Corpora.shared(index.vectors, index.texts, 1)  # no lexical index
    with pytest.raises(SearchError, match="the corpus has no lexical index"):
        hops.greedy_hops(model, [QUESTION], corpora, [1], lexical_weight=1.0)  # type: ignore[arg-type]
    with pytest.raises(SearchError, match="lexical_weight must be a finite number >= 0 or 'model', got -1"):
        SearchConfig(lexical_weight=-1).validate()


def test_the_searcher_builds_the_index_the_model_needs_and_saves_it(tmp_path: Path) -> None:
    model, index = _lexical_fake(weight=0.0)
    assert MultiHopSearcher(model, index).store.lexical is None  # type: ignore[arg-type]
    model.hop_settings = HopSettings(max_hops=3, stop_threshold=None, lexical_weight=1.0)
    assert MultiHopSearcher(model, index).store.lexical is not None  # type: ignore[arg-type,union-attr]
    index.save(tmp_path / "ix")
    loaded = ChunkIndex.load(tmp_path / "ix")
    assert loaded.lexical is not None
    assert torch.equal(loaded.lexical.scores([QUESTION]), index.lexical.scores([QUESTION]))  # type: ignore[union-attr]
    assert json.loads((tmp_path / "ix" / "index.json").read_text())["lexical"] is True


@pytest.mark.parametrize("damage", ["missing", "header", "array", "count"])
def test_a_damaged_lexical_index_is_refused_by_name(tmp_path: Path, damage: str) -> None:
    _, index = _lexical_fake(weight=0.0)
    index.with_lexical().save(tmp_path / "ix")
    lexical = tmp_path / "ix" / "lexical"
    if damage == "missing":
        for f in lexical.iterdir():
            f.unlink()
        lexical.rmdir()
    elif damage == "header":
        (lexical / "lexical.json").write_text("{not json")
    elif damage == "array":
        next(lexical.glob("rows.npy")).write_bytes(b"\x93NUMPY truncated")
    else:
        head = json.loads((lexical / "lexical.json").read_text())
        (lexical / "lexical.json").write_text(json.dumps({**head, "count": 7}))
    with pytest.raises(IndexLoadError, match="lexical"):
        ChunkIndex.load(tmp_path / "ix")
    with pytest.raises(LexicalLoadError):
        LexicalIndex.load(lexical, count=4)


def test_an_index_saved_before_lexical_evidence_loads_without_one(tmp_path: Path) -> None:
    _, index = _lexical_fake(weight=0.0)
    index.save(tmp_path / "ix")
    head = json.loads((tmp_path / "ix" / "index.json").read_text())
    del head["lexical"]
    (tmp_path / "ix" / "index.json").write_text(json.dumps(head))
    assert ChunkIndex.load(tmp_path / "ix").lexical is None
