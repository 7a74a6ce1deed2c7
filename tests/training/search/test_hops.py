"""The hop engine, on hand-computed cases: rendering, scoring with masks and padding, greedy hops, the stop rule,
and the environment replay that turns an evaluation's hops into the MDP's rewards."""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import SimpleNamespace

import pytest
import torch

from qrag.training.data.episode import Episode
from qrag.training.learn.config import EnvConfig
from qrag.training.learn.evaluation import replay
from qrag.training.search import hops


class TableNet:
    """Position-free stand-in: state vector = table[(question, taken texts)], Q = inner product."""

    def __init__(self, table: dict[tuple[str, tuple[str, ...]], list[float]], order: str = "selection") -> None:
        self.table = table
        self.config = SimpleNamespace(position_mode="none", state_order=order)
        self.dim = 2
        self.seen: list[tuple[str, tuple[str, ...]]] = []

    def embed_states(self, questions: Sequence[str], pieces: Sequence[Sequence[str]], batch_size: int = 128) -> torch.Tensor:
        self.seen += [(q, tuple(p)) for q, p in zip(questions, pieces, strict=True)]
        return torch.tensor([self.table[(q, tuple(p))] for q, p in zip(questions, pieces, strict=True)])

    def positions(self, selected: torch.Tensor, valid: torch.Tensor | None = None, num_gaps: int | None = None) -> None:
        return None

    def score(self, states: torch.Tensor, chunks: torch.Tensor, positions: None = None, heads: bool = False) -> torch.Tensor:
        q = states @ chunks.T if chunks.dim() == 2 else torch.einsum("bd,bnd->bn", states, chunks)
        return torch.stack((q / 2, q / 2)) if heads else q


def test_state_pieces_render_in_taking_or_corpus_order() -> None:
    assert hops.state_pieces(["c", "a", "b"], [2, 0, 1], "selection") == ["c", "a", "b"]
    assert hops.state_pieces(["c", "a", "b"], [2, 0, 1], "document") == ["a", "b", "c"]
    # A store that does not record positions: placed chunks first, the rest in taking order.
    assert hops.state_pieces(["x", "c", "y", "a"], [None, 2, None, 0], "document") == ["a", "c", "x", "y"]


def test_q_values_mask_taken_chunks_and_padding_per_question() -> None:
    net = TableNet({})
    corpora = hops.Corpora.padded([torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), torch.tensor([[2.0, 0.0]])],
                                  [["a", "b", "c"], ["d"]], torch.device("cpu"))
    states = torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.5, 0.5]])  # rows: question 0 twice, question 1
    scores, positions = hops.q_values(net, states, corpora, [0, 0, 1], [[], [2], []])  # type: ignore[arg-type]
    inf = -math.inf
    assert positions is None
    assert scores.tolist() == [[1.0, 2.0, 3.0], [3.0, 0.0, inf], [1.0, inf, inf]]
    heads, _ = hops.q_values(net, states, corpora, [0, 0, 1], [[], [2], []], heads=True)  # type: ignore[arg-type]
    assert heads.shape == (2, 3, 3) and heads[0].tolist() == [[0.5, 1.0, 1.5], [1.5, 0.0, inf], [0.5, inf, inf]]
    shared = hops.Corpora.shared(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), ["a", "b"], 2)
    scores, _ = hops.q_values(net, states[:2], shared, [0, 1], [[1], []])  # type: ignore[arg-type]
    assert scores.tolist() == [[1.0, inf], [3.0, 0.0]]
    with pytest.raises(hops.SearchError, match="NaN or infinite Q-values for question 'why'"):
        hops.q_values(net, torch.tensor([[math.nan, 0.0]]), shared, [0], [[]], names=["why"])  # type: ignore[arg-type]


# Corpus a=(1,0), b=(0,1), c=(1,1). Hand-computed Q per state: () → a 3, b 1, c 4 (takes c);
# (c) → a 2, b 0.5 (takes a); (c, a) → b 0.25 (takes b).
TABLE = {("q", ()): [3.0, 1.0], ("q", ("c",)): [2.0, 0.5], ("q", ("c", "a")): [0.0, 0.25],
         ("q", ("a", "c")): [0.0, 0.25]}
VECTORS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def test_greedy_hops_follow_the_argmax_and_stop_where_told() -> None:
    net = TableNet(TABLE)
    corpora = hops.Corpora.shared(VECTORS, ["a", "b", "c"], 1)
    def hopped(taken: list[int], q: list[float]) -> list[hops.Hopped]:
        return [hops.Hopped(taken, q, q)]  # no lexical evidence: the scores are the Q-values

    assert hops.greedy_hops(net, ["q"], corpora, [3]) == hopped([2, 0, 1], [4.0, 2.0, 0.25])  # type: ignore[arg-type]
    assert hops.greedy_hops(net, ["q"], corpora, [2]) == hopped([2, 0], [4.0, 2.0])  # type: ignore[arg-type]
    # The stop rule refuses hop 2 (best Q 0.25 < 1) before taking it; min_hops keeps the first hops.
    assert hops.greedy_hops(net, ["q"], corpora, [3], threshold=1.0) == hopped([2, 0], [4.0, 2.0])  # type: ignore[arg-type]
    assert hops.greedy_hops(net, ["q"], corpora, [3], threshold=5.0, min_hops=0) == hopped([], [])  # type: ignore[arg-type]
    assert hops.greedy_hops(net, ["q"], corpora, [3], threshold=5.0) == hopped([2], [4.0])  # type: ignore[arg-type]
    # `done` ends a question after the hop that completes it (evaluation: its facts are in).
    assert hops.greedy_hops(net, ["q"], corpora, [3], done=lambda b, t: 0 in t) == hopped([2, 0], [4.0, 2.0])  # type: ignore[arg-type]
    # Document state order renders (c, a) as "a, c".
    doc = TableNet(TABLE, order="document")
    hops.greedy_hops(doc, ["q"], corpora, [3])  # type: ignore[arg-type]
    assert doc.seen == [("q", ()), ("q", ("c",)), ("q", ("a", "c"))]
    assert hops.top_up(net, ["q"], corpora, [[2]], k=3) == [[(0, 2.0, 2.0), (1, 0.5, 0.5)]]  # type: ignore[arg-type]
    assert hops.top_up(net, ["q"], corpora, [[2, 0, 1]], k=3) == [[]]  # type: ignore[arg-type]


def test_beam_hops_keep_the_best_sequences_and_fill_up_after_the_last_hop() -> None:
    net = TableNet({**TABLE, ("q", ("a",)): [1.0, 5.0]})  # (a) → b 5, c 6
    corpora = hops.Corpora.shared(VECTORS, ["a", "b", "c"], 1)
    expand = hops.corpus_expand(net, ["q"], corpora)  # type: ignore[arg-type]
    # Greedy takes c (4) then a (2): 6. A beam of two also keeps a (3), and a then c is 3 + 6 = 9.
    assert hops.beam_hops(expand, 1, [2], 1) == [hops.Beam((2, 0), (4.0, 2.0), (4.0, 2.0))]
    assert hops.beam_hops(expand, 1, [2], 1)[0].total == 6.0
    assert hops.beam_hops(expand, 1, [2], 2) == [hops.Beam((0, 2), (3.0, 6.0), (3.0, 6.0))]
    assert hops.beam_hops(expand, 1, [0], 2) == [hops.Beam()]
    # One beam is greedy search: the stop rule acts live (hop 1's best Q, 2, is below 2.5); wider beams leave it.
    assert hops.beam_hops(expand, 1, [2], 1, threshold=2.5) == [hops.Beam((2,), (4.0,), (4.0,))]
    assert hops.beam_hops(expand, 1, [2], 2, threshold=50.0) == [hops.Beam((0, 2), (3.0, 6.0), (3.0, 6.0))]
    # The chunks left after the last hop, best first, up to k results and at most the corpus.
    assert hops.fill_up(expand, [(0, 2)], 3, [3]) == [[(1, 0.25, 0.25)]]
    assert hops.fill_up(expand, [(0, 2)], 2, [None]) == [[]]
    assert (hops.fill_up(expand, [(2,)], 5, [3]) == hops.top_up(net, ["q"], corpora, [[2]], k=5)  # type: ignore[arg-type]
            == [[(0, 2.0, 2.0), (1, 0.5, 0.5)]])


def test_stop_point_counts_the_hops_the_rule_keeps() -> None:
    assert hops.stop_point([0.9, 0.8, 0.4, 0.1], 0.5, 1) == 2
    assert hops.stop_point([0.3, 0.8], 0.5, 1) == 2  # the first hop is always kept with min_hops=1
    assert hops.stop_point([0.3, 0.8], 0.5, 0) == 0
    assert hops.stop_point([0.3, 0.1], None, 1) == 2


def test_replay_pays_the_mdp_rewards_and_checks_the_actions_fit_the_episode() -> None:
    episodes = [Episode("q1", ["a", "b", "c"], (0, 2)), Episode("q2", ["a", "b"], (1,))]
    cfg = EnvConfig(max_hops=3, penalize_extra_steps=True)
    states = replay(episodes, [[1, 0, 2], [1]], cfg, "selection")
    assert [(s.steps, s.completed) for s in states] == [(3, True), (1, True)]
    assert [s.episode_return for s in states] == pytest.approx([0.5 + 0.5 * 2 / 3, 1.0])  # |SF| / steps
    with pytest.raises(ValueError, match="ran out at step 1"):
        replay(episodes, [[1], [1]], cfg, "selection")
    with pytest.raises(ValueError, match="past the step"):
        replay(episodes, [[0, 2, 1], [1, 0]], cfg, "selection")
