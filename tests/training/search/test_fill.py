"""The question fill (`fill='question'`, the off-domain guard, and `'question_unguarded'`; METHOD.md §4.4): an
exact-k search fills past its hops from the question's own state, ranked as the first hop ranks it (the Q-value plus
any lexical evidence of the question), so every hit of one search carries a score on one scale. Hand-computed on a
fake Q-network with known vectors; on the real tiny network, an untrained one's fill is cosine search with the base
encoder."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from qrag.eval.baselines import DenseRetriever, MultiHopRetriever
from qrag.training.data import Episode
from qrag.training.model.qnet import CheckpointError, QNetwork
from qrag.training.search.index import ChunkIndex, ScoredChunk
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, SearchError, search_many
from qrag.training.search.settings import HopSettings
from tests.training.search.test_search import STOP_TABLE, TEXTS, FakeQNet, _fake, _view

# The chunk tower's ranking of the bare question (D .9, C .5, B .3, A .1): what the fill ranked by before it moved to
# the hops' scale. A fill that still read it would put D first.
QUESTION_VECTOR = [0.1, 0.3, 0.5, 0.9]


class GuardedFake(FakeQNet):
    """The fake Q-network of test_search with a bare-question vector (`QNetwork.embed_questions`)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.question_calls: list[int] = []

    def embed_questions(self, questions: Sequence[str], batch_size: int = 128) -> torch.Tensor:
        self.question_calls.append(len(questions))
        return torch.tensor([QUESTION_VECTOR for _ in questions])

    def score(self, states: torch.Tensor, chunks: torch.Tensor, positions: None = None,
              heads: bool = False) -> torch.Tensor:
        if chunks.dim() == 3:  # one corpus per question (search_many)
            return torch.einsum("bd,bnd->bn", states, chunks)
        return states @ chunks.T


def _guarded(threshold: float = 0.85) -> tuple[GuardedFake, ChunkIndex]:
    model, index = _fake(STOP_TABLE, GuardedFake)
    assert isinstance(model, GuardedFake)
    model.hop_settings = HopSettings(max_hops=4, stop_threshold=threshold, fill="question")
    return model, index


class ListStore:
    """An external store: the index's own ranking through the `ChunkStore` protocol."""

    def __init__(self, index: ChunkIndex) -> None:
        self.index = index
        self.widths: list[int] = []

    def search(self, queries: torch.Tensor, k: int,
               exclude: Sequence[Collection[str]] | None = None) -> list[list[ScoredChunk]]:
        self.widths.append(k)
        return self.index.search(queries, k, exclude)


def test_the_refused_hop_is_not_taken_and_the_rest_is_the_questions_ranking() -> None:
    # STOP_TABLE: hop 1 takes A (.9); the best second hop is B at .8 < .85, refused; the bare question's state ranks
    # A .9, B .7, C .1, D 0: after A, B and C fill k = 3, flagged past the stop, with that state's Q-values (the
    # first hop's scale), after hop index 1. The chunk tower's ranking of the question (D .9, C .5) is not used.
    model, index = _guarded(0.85)
    s = MultiHopSearcher(model, index)  # type: ignore[arg-type]
    r = s.search_one("q", k=3)
    assert _view(r) == [("A", 0, 0.9, False), ("B", 1, 0.7, True), ("C", 1, 0.1, True)] and r.hops_kept == 1
    # hop 1 and the refused hop; the question's ranking is hop 1's, not encoded again
    assert model.state_calls == [1, 1] and model.question_calls == []
    # A lower threshold keeps B (.8); hop 3's best, C at .4, is refused; C (.1 for the question) fills the third.
    model, index = _guarded(0.5)
    s = MultiHopSearcher(model, index)  # type: ignore[arg-type]
    assert _view(s.search_one("q", k=3)) == [("A", 0, 0.9, False), ("B", 1, 0.8, False), ("C", 2, 0.1, True)]
    # The hits not past the stop are the adaptive answer, as without the guard.
    assert [h.chunk.id for h in s.search_one("q", k=4).hits if not h.past_stop] == [
        h.chunk.id for h in s.search_one("q").hits] == ["A", "B"]
    # Per call: fill='state' is the unguarded search (every hop up to k, then the last state's ranking).
    assert _view(s.search_one("q", k=3, fill="state")) == [
        ("A", 0, 0.9, False), ("B", 1, 0.8, False), ("C", 2, 0.4, True)]
    # No stop rule: the guard takes every hop up to min(k, max_hops) and fills after them.
    assert _view(s.search_one("q", k=3, max_hops=2, stop_threshold=None)) == [
        ("A", 0, 0.9, False), ("B", 1, 0.8, False), ("C", 2, 0.1, True)]


def test_the_guard_is_the_same_over_beams_stores_and_batched_corpora() -> None:
    model, index = _guarded(0.85)
    expected = [("A", 0, 0.9, False), ("B", 1, 0.7, True), ("C", 1, 0.1, True)]
    # Beam 2 over the horizon: the best sequence A, B, C (2.1) is cut where the stop rule cuts it (before B).
    assert _view(MultiHopSearcher(model, index).search_one("q", k=3, beam_size=2)) == expected  # type: ignore[arg-type]
    listed = ListStore(index)
    store = MultiHopSearcher(model, listed)  # type: ignore[arg-type]
    model.state_calls.clear()
    assert _view(store.search_one("q", k=3)) == expected
    # over a store too the question's ranking is hop 1's: the first hop asks the store for k, the fill reads them back
    assert model.state_calls == [1, 1] and model.question_calls == [] and listed.widths == [3, 1]
    assert _view(store.search_one("q", k=3, beam_size=2)) == expected
    assert _view(search_many(model, ["q", "q"], [index, index], SearchConfig(k=3))[1]) == expected  # type: ignore[arg-type]


def test_bad_fill_values_are_refused_by_name(tmp_path: Path, tiny_qnet: QNetwork) -> None:
    with pytest.raises(SearchError, match=r"fill must be one of \['state', 'question', 'question_unguarded', 'model'\], "
                                          r"got 'cosine'"):
        SearchConfig(fill="cosine").validate()  # type: ignore[arg-type]
    tiny_qnet.hop_settings = HopSettings(max_hops=2, stop_threshold=0.4, calibrated=True, fill="question")
    folder = tiny_qnet.save_pretrained(tmp_path / "m")
    assert QNetwork.from_pretrained(folder).hop_settings.fill == "question"  # saved with the model
    config = json.loads((folder / "qrag_config.json").read_text())
    del config["hops"]["fill"]  # a checkpoint saved before the guard existed searches as it always did
    (folder / "qrag_config.json").write_text(json.dumps(config))
    assert QNetwork.from_pretrained(folder).hop_settings.fill == "state"
    config["hops"]["fill"] = "cosine"
    (folder / "qrag_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"hops.fill must be one of \['state', 'question', 'question_unguarded'\], "
                                              r"got 'cosine'"):
        QNetwork.from_pretrained(folder)


def test_an_untrained_networks_fill_is_cosine_search_with_the_base_encoder(tiny_encoder_path: Path) -> None:
    # An untrained normalising network: its bare question state is the base encoder's question vector, so the
    # fill's ranking is what the cosine baseline ranks by; with a threshold no hop passes, one hop is taken and the
    # rest is that ranking.
    tiny_qnet = QNetwork.from_encoder(str(tiny_encoder_path), normalize=True).eval()
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS)
    question = "Where is the milk?"
    base = tiny_qnet.embed_questions([question])  # (1, D)
    assert torch.allclose(base, tiny_qnet.embed_states([question], [[]]), atol=1e-5)  # the bare state, untrained
    hits = MultiHopSearcher(tiny_qnet, index).search_one(question, k=len(TEXTS), fill="question",
                                                         stop_threshold=1e9).hits
    assert hits[0].hop == 0 and not hits[0].past_stop and all(h.past_stop and h.hop == 1 for h in hits[1:])
    rest = [i for i in (base @ index.vectors.T)[0].argsort(descending=True).tolist() if str(i) != hits[0].chunk.id]
    assert [int(h.chunk.id) for h in hits[1:]] == rest
    episode = Episode(question, tuple(TEXTS), (0,))
    cosine = DenseRetriever(tiny_qnet, budget=len(TEXTS), name="cosine", cosine=True).retrieve([episode])[0]
    assert [int(h.chunk.id) for h in hits[1:]] == [r for r in cosine.indices if str(r) != hits[0].chunk.id]


def test_qrag_eval_counts_the_guards_hops_and_encoder_calls(tiny_qnet: QNetwork) -> None:
    tiny_qnet.eval().hop_settings = dataclasses.replace(tiny_qnet.hop_settings, max_hops=3, stop_threshold=1e9,
                                                         fill="question")
    episode = Episode("Where is the milk?", tuple(TEXTS), (0, 2))
    guarded = MultiHopRetriever(tiny_qnet, name="qrag", budget=5).retrieve([episode])[0]
    assert guarded.hops == 1 and len(guarded.indices) == 5
    assert guarded.encoder_calls == 3  # hop 1, the refused hop 2, the bare question
    plain = MultiHopRetriever(tiny_qnet, name="qrag", budget=5, fill="state").retrieve([episode])[0]
    assert plain.hops == 3 and plain.encoder_calls == 4  # three hops, then the last state's top-up
