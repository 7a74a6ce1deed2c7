"""MultiHopSearcher: the stop rule and beam search on a fake Q-network with known vectors (exact,
hand-computed), and the real tiny network against slow loop versions."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from types import SimpleNamespace

import pytest
import torch

from qrag.training.model.positions import relative_positions, rotate_halves
from qrag.training.model.qnet import QNetwork
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, SearchError, load_model
from qrag.training.search.settings import HopSettings

TEXTS = [
    "Mary went to the kitchen.", "John picked up the apple.", "Mary took the milk there.",
    "Sandra travelled to the office.", "John went to the garden.", "Daniel dropped the football.",
    "The milk is in the fridge.", "Sandra grabbed the ball.", "Daniel journeyed to the bedroom.",
    "Mary left the milk.", "John moved to the hallway.", "The apple is red.",
]
QUESTIONS = ["Where is the milk?", "Where is the apple?", "Who has the ball?", "Where is Daniel?", "What is red?"]


class FakeQNet:
    """A QNetwork stand-in with known vectors: chunk text → vector, (question, taken texts) → state."""

    def __init__(self, chunks: dict[str, list[float]], states: Callable[[str, tuple[str, ...]], list[float]]) -> None:
        self.chunks, self.states = chunks, states
        self.dim = len(next(iter(chunks.values())))
        self.device = torch.device("cpu")
        self.config = SimpleNamespace(position_mode="none", state_order="selection", encoder="fake")
        self.hop_settings = HopSettings()
        self.state_calls: list[int] = []

    def eval(self) -> FakeQNet:
        return self

    def embed_chunks(self, texts: Sequence[str], batch_size: int = 128, show_progress: bool = False) -> torch.Tensor:
        return torch.tensor([self.chunks[t] for t in texts])

    def check_chunk_lengths(self, texts: Sequence[str], *, stacklevel: int = 2) -> int:
        return 0  # one-letter chunks: never too long

    def embed_states(self, questions: Sequence[str], selected: Sequence[Sequence[str]],
                     batch_size: int = 128) -> torch.Tensor:
        self.state_calls.append(len(questions))
        return torch.tensor([self.states(q, tuple(s)) for q, s in zip(questions, selected, strict=True)])

    def positions(self, selected: torch.Tensor, valid: torch.Tensor | None = None, num_gaps: int | None = None) -> None:
        return None  # position mode 'none'

    def score(self, states: torch.Tensor, chunks: torch.Tensor, positions: None = None,
              heads: bool = False) -> torch.Tensor:
        return states @ chunks.T  # (R, N): the inner product, as QNetwork.score in mode 'none'


def _fake(table: dict[tuple[str, ...], list[float]], cls: type[FakeQNet] = FakeQNet) -> tuple[FakeQNet, ChunkIndex]:
    eye = {name: [float(i == j) for j in range(4)] for i, name in enumerate("ABCD")}
    model = cls(eye, lambda q, sel: table.get(sel, [0.0] * 4))
    return model, ChunkIndex.from_texts(model, list("ABCD"), ids=list("ABCD"))  # type: ignore[arg-type]


# Hand-computed: Q(()) = A .9, B .7; Q((A,)) = B .8; Q((A, B)) = C .4, D .2; Q((A, B, C)) = D .1
STOP_TABLE = {(): [0.9, 0.7, 0.1, 0.0], ("A",): [0.0, 0.8, 0.3, 0.2], ("A", "B"): [0.0, 0.0, 0.4, 0.2],
              ("A", "B", "C"): [0.0, 0.0, 0.0, 0.1]}


def _view(result) -> list[tuple[str, int, float, bool]]:  # type: ignore[no-untyped-def]
    return [(h.chunk.id, h.hop, round(h.q_value, 6), h.past_stop) for h in result.hits]


def test_stop_rule_stops_before_the_hop_whose_best_q_is_below_threshold() -> None:
    model, index = _fake(STOP_TABLE)
    s = MultiHopSearcher(model, index)  # type: ignore[arg-type]
    r = s.search_one("q")
    assert _view(r) == [("A", 0, 0.9, False), ("B", 1, 0.8, False)] and r.hops_kept == 2
    assert model.state_calls == [1, 1, 1]  # no encoder call after the stop
    assert [h.chunk.id for h in s.search_one("q", stop_threshold=0.85).hits] == ["A"]
    assert [h.chunk.id for h in s.search_one("q", stop_threshold=0.95).hits] == ["A"]  # min_hops=1
    assert s.search_one("q", stop_threshold=0.95, min_hops=0).hits == []
    assert [h.chunk.id for h in s.search_one("q", stop_threshold=None, max_hops=3).hits] == ["A", "B", "C"]


def test_explicit_k_returns_exactly_k_and_flags_hits_past_the_stop() -> None:
    model, index = _fake(STOP_TABLE)
    s = MultiHopSearcher(model, index)  # type: ignore[arg-type]
    assert _view(s.search_one("q", k=1)) == [("A", 0, 0.9, False)]
    assert _view(s.search_one("q", k=3)) == [("A", 0, 0.9, False), ("B", 1, 0.8, False), ("C", 2, 0.4, True)]
    assert _view(s.search_one("q", k=4)) == [
        ("A", 0, 0.9, False), ("B", 1, 0.8, False), ("C", 2, 0.4, True), ("D", 3, 0.1, True)]
    # k beyond max_hops: the rest comes from the ranking of the state after the last hop (hop index 2)
    assert _view(s.search_one("q", k=4, max_hops=2)) == [
        ("A", 0, 0.9, False), ("B", 1, 0.8, False), ("C", 2, 0.4, True), ("D", 2, 0.2, True)]
    assert len(s.search_one("q", k=50).hits) == 4  # k larger than the corpus: the whole corpus
    adaptive = [h.chunk.id for h in s.search_one("q").hits]
    assert [h.chunk.id for h in s.search_one("q", k=4).hits if not h.past_stop] == adaptive


def test_beam_search_finds_a_higher_total_sequence_and_beam_1_is_greedy() -> None:
    # Greedy takes A (.9) then C (.1): total 1.0. Starting with B (.8) allows C (.9): total 1.7.
    table = {(): [0.9, 0.8, 0.0, 0.0], ("A",): [0.0, 0.05, 0.1, 0.0], ("B",): [0.2, 0.0, 0.9, 0.0]}
    model, index = _fake(table)
    s = MultiHopSearcher(model, index, SearchConfig(stop_threshold=None, max_hops=2))  # type: ignore[arg-type]
    assert [h.chunk.id for h in s.search_one("q", beam_size=1).hits] == ["A", "C"]
    beam = s.search_one("q", beam_size=2)
    assert _view(beam) == [("B", 0, 0.8, False), ("C", 1, 0.9, False)]
    assert [h.chunk.id for h in s.search_one("q", beam_size=2, order="document").hits] == ["B", "C"]


def _greedy_loop(qnet: QNetwork, texts: list[str], question: str, hops: int) -> list[tuple[int, float]]:
    """Slow reference: one question, one chunk at a time, positions recomputed from scratch each hop."""
    vectors = qnet.embed_chunks(texts)  # (N, D)
    taken: list[int] = []
    picks: list[tuple[int, float]] = []
    for _ in range(hops):
        state = qnet.embed_states([question], [[texts[i] for i in taken]])[0]  # (D,)
        selected = torch.tensor([[i in taken for i in range(len(texts))]])  # (1, N)
        pos = relative_positions(selected)[0] if qnet.config.position_mode == "relative" else None  # (N,)
        best = (-1, -float("inf"))
        for i in range(len(texts)):
            if i in taken:
                continue
            v = vectors[i] if pos is None else rotate_halves(vectors[i : i + 1], pos[i : i + 1])[0]  # (D,)
            q = float(state @ v)
            if q > best[1]:
                best = (i, q)
        taken.append(best[0])
        picks.append(best)
    return picks


@pytest.fixture(scope="module")
def relative_qnet(tiny_encoder_path) -> QNetwork:  # type: ignore[no-untyped-def]
    return QNetwork.from_encoder(str(tiny_encoder_path), position_mode="relative")


@pytest.mark.parametrize("mode", ["none", "relative"])
def test_greedy_search_equals_slow_loop(mode: str, tiny_qnet: QNetwork, relative_qnet: QNetwork) -> None:
    qnet = tiny_qnet if mode == "none" else relative_qnet
    s = MultiHopSearcher(qnet, ChunkIndex.from_texts(qnet, TEXTS))
    for question in QUESTIONS[:2]:
        got = s.search_one(question, k=4).hits
        want = _greedy_loop(qnet, TEXTS, question, 4)
        assert [int(h.chunk.id) for h in got] == [i for i, _ in want]
        assert [h.q_value for h in got] == pytest.approx([q for _, q in want], abs=1e-5)


@pytest.mark.parametrize("mode", ["none", "relative"])
def test_batched_questions_equal_one_at_a_time(mode: str, tiny_qnet: QNetwork, relative_qnet: QNetwork) -> None:
    qnet = tiny_qnet if mode == "none" else relative_qnet
    s = MultiHopSearcher(qnet, ChunkIndex.from_texts(qnet, TEXTS))
    for opts in ({"k": 5}, {"k": 3, "beam_size": 3}):
        batched = s.search(QUESTIONS, **opts)
        single = [s.search_one(q, **opts) for q in QUESTIONS]
        assert [[h.chunk.id for h in r.hits] for r in batched] == [[h.chunk.id for h in r.hits] for r in single]
        for a, b in zip(batched, single, strict=True):
            assert [h.q_value for h in a.hits] == pytest.approx([h.q_value for h in b.hits], abs=1e-5)


def test_taken_chunks_never_return_and_document_order(tiny_qnet: QNetwork) -> None:
    s = MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, TEXTS))
    r = s.search_one(QUESTIONS[0], k=len(TEXTS), max_hops=len(TEXTS))
    assert sorted(h.chunk.id for h in r.hits) == sorted(str(i) for i in range(len(TEXTS)))
    doc = s.search_one(QUESTIONS[0], k=4, order="document").hits
    assert [h.chunk.position for h in doc] == sorted(h.chunk.position for h in doc)  # type: ignore[type-var]
    assert sorted(h.hop for h in doc) == [0, 1, 2, 3]


def test_faiss_search_equals_torch(tiny_qnet: QNetwork) -> None:
    pytest.importorskip("faiss")
    exact = MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, TEXTS))
    fa = MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, TEXTS, backend="faiss"))
    a, b = exact.search(QUESTIONS, k=4, beam_size=2), fa.search(QUESTIONS, k=4, beam_size=2)
    assert [[h.chunk.id for h in r.hits] for r in a] == [[h.chunk.id for h in r.hits] for r in b]


def test_concurrent_threads_equal_serial(tiny_qnet: QNetwork) -> None:
    s = MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, TEXTS))
    serial = [[h.chunk.id for h in s.search_one(q, k=3).hits] for q in QUESTIONS]
    got: dict[int, list[str]] = {}

    def work(i: int) -> None:
        got[i] = [h.chunk.id for h in s.search_one(QUESTIONS[i % len(QUESTIONS)], k=3).hits]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(8)] == [serial[i % len(QUESTIONS)] for i in range(8)]


def test_bad_arguments_get_clear_errors(tiny_qnet: QNetwork, relative_qnet: QNetwork, tmp_path) -> None:  # type: ignore[no-untyped-def]
    index = ChunkIndex.from_texts(tiny_qnet, TEXTS)
    s = MultiHopSearcher(tiny_qnet, index)
    with pytest.raises(SearchError, match="k must be an integer >= 1, got 0"):
        s.search_one("q", k=0)
    with pytest.raises(SearchError, match="non-empty string"):
        s.search(["ok", "  "])
    with pytest.raises(SearchError, match="non-empty string"):
        s.search([3])  # type: ignore[list-item]
    with pytest.raises(SearchError, match=r"unknown search argument\(s\) \['top_k'\]"):
        s.search_one("q", top_k=3)
    with pytest.raises(SearchError, match="dim 32 but the index holds dim 8"):
        MultiHopSearcher(tiny_qnet, ChunkIndex(torch.randn(3, 8), ["a", "b", "c"]))

    class Store:
        def search(self, queries, k, exclude=None):  # type: ignore[no-untyped-def]
            return [[] for _ in range(len(queries))]

    with pytest.raises(SearchError, match="external store"):
        MultiHopSearcher(relative_qnet, Store())  # type: ignore[arg-type]
    with pytest.raises(Exception, match="does not exist"):
        load_model(str(tmp_path / "missing" / "model"))
    with pytest.raises(TypeError, match="QNetwork, a checkpoint folder"):
        load_model(42)  # type: ignore[arg-type]


def test_load_model_reads_a_checkpoint_folder(tiny_qnet: QNetwork, tmp_path) -> None:  # type: ignore[no-untyped-def]
    tiny_qnet.save_pretrained(tmp_path / "ckpt")
    loaded = load_model(tmp_path / "ckpt")
    torch.testing.assert_close(loaded.embed_chunks(TEXTS[:2]), tiny_qnet.embed_chunks(TEXTS[:2]))


def test_searcher_save_load_round_trip(tiny_qnet: QNetwork, tmp_path) -> None:  # type: ignore[no-untyped-def]
    s = MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, TEXTS), SearchConfig(max_hops=2, min_hops=2))
    loaded = MultiHopSearcher.load(s.save(tmp_path / "s"))
    assert loaded.config == s.config
    assert [[(h.chunk, h.q_value) for h in r.hits] for r in loaded.search(QUESTIONS, k=3)] == [
        [(h.chunk, h.q_value) for h in r.hits] for r in s.search(QUESTIONS, k=3)]
    with pytest.raises(SearchError, match="search.json is missing"):
        MultiHopSearcher.load(tmp_path / "nothing")
    (tmp_path / "s" / "search.json").write_text("[]")
    with pytest.raises(SearchError, match="corrupt"):
        MultiHopSearcher.load(tmp_path / "s")


@pytest.mark.usefixtures("bf16_as_native")
def test_a_saved_searcher_keeps_its_serving_precision(tiny_encoder_path, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    qnet = load_model(str(tiny_encoder_path), precision="bf16")
    assert qnet.serving_precision == "bf16" and not qnet.training
    s = MultiHopSearcher(qnet, ChunkIndex.from_texts(qnet, TEXTS))
    folder = s.save(tmp_path / "s")
    head = json.loads((folder / "search.json").read_text())
    assert head["serving_precision"] == "bf16"
    loaded = MultiHopSearcher.load(folder)
    assert loaded.model.serving_precision == "bf16"
    assert [[h.chunk for h in r.hits] for r in loaded.search(QUESTIONS, k=3)] == [
        [h.chunk for h in r.hits] for r in s.search(QUESTIONS, k=3)]
    del head["serving_precision"]  # a save from before serving precisions: fp32
    (folder / "search.json").write_text(json.dumps(head))
    assert MultiHopSearcher.load(folder).model.serving_precision == "fp32"
    (folder / "search.json").write_text(json.dumps({**head, "serving_precision": "fp16"}))  # saved on a GPU
    with pytest.warns(UserWarning, match="fp16, which needs a GPU"):
        assert MultiHopSearcher.load(folder).model.serving_precision == "fp32"
    (folder / "search.json").write_text(json.dumps({**head, "serving_precision": "int4"}))
    with pytest.raises(SearchError, match="corrupt.*int4"):
        MultiHopSearcher.load(folder)
    with pytest.raises(ValueError, match="'fp16' needs a GPU"):
        load_model(str(tiny_encoder_path), precision="fp16")


@pytest.mark.parametrize("mode,order", [("relative", "document"), ("none", "selection"), ("absolute", "selection")])
def test_search_many_equals_one_searcher_per_question(tiny_encoder_path, monkeypatch, mode: str, order: str) -> None:  # type: ignore[no-untyped-def]
    import qrag.training.search.hops
    from qrag.training.search.hops import Corpora
    from qrag.training.search.searcher import search_corpora, search_many

    qnet = QNetwork.from_encoder(str(tiny_encoder_path), position_mode=mode, state_order=order)
    words = ["kitchen", "garden", "milk", "Mary", "John", "office", "apple", "hallway", "Sandra", "ball"]
    corpora = [[f"{words[(i * 3 + j) % 10]} {words[(i + 2 * j) % 10]} number {j}." for j in range(n)]
               for i, n in enumerate([7, 12, 3, 9, 1])]  # different sizes: padding must not matter
    questions = ["Where is the milk?", "Where is Mary?", "Who has the apple?", "Where is John?", "What?"]
    indexes = [ChunkIndex.from_texts(qnet, c, show_progress=False) for c in corpora]
    q_values = [h.q_value for ix, q in zip(indexes, questions, strict=True)
          for h in MultiHopSearcher(qnet, ix).search_one(q, k=3, max_hops=3).hits]
    mid = sorted(q_values)[len(q_values) // 2 - 1 : len(q_values) // 2 + 1]
    threshold = sum(mid) / 2  # between two Q-values: the stop rule cuts some questions early, not others
    configs = [SearchConfig(k=None, max_hops=3, stop_threshold=threshold, order="document"),
               SearchConfig(k=2, max_hops=3), SearchConfig(k=5, max_hops=3, stop_threshold=threshold),
               SearchConfig(k=None, max_hops=4, stop_threshold=None, batch_size=2)]
    for budget in (qrag.training.model.positions.ROTATE_BUDGET, 1):  # 1: every hop scores one state row at a time
        monkeypatch.setattr(qrag.training.model.positions, "ROTATE_BUDGET", budget)
        for cfg in configs:
            many = search_many(qnet, questions, indexes, cfg)
            for ix, q, got in zip(indexes, questions, many, strict=True):
                want = MultiHopSearcher(qnet, ix, cfg).search_one(q)
                assert [(h.chunk.id, h.hop, h.past_stop) for h in got.hits] == \
                    [(h.chunk.id, h.hop, h.past_stop) for h in want.hits], (budget, cfg, q)
                assert [h.q_value for h in got.hits] == pytest.approx([h.q_value for h in want.hits], abs=1e-5)
                assert got.hops_kept == want.hops_kept
                (alone,) = search_corpora(qnet, [q], Corpora.shared(ix.vectors, ix.texts, 1), [ix.chunk], cfg)
                assert [(h.chunk, h.hop, h.past_stop) for h in alone.hits] == [(h.chunk, h.hop, h.past_stop)
                                                                                for h in got.hits]
        assert any(len(r.hits) < 3 for r in search_many(qnet, questions, indexes, configs[0]))  # the rule did cut
    with pytest.raises(SearchError, match="beam_size"):
        search_many(qnet, questions, indexes, SearchConfig(beam_size=2))
    with pytest.raises(SearchError, match="one index per question"):
        search_many(qnet, questions, indexes[:2])
