"""The query-cost benchmark's readings (`qrag.eval.query_cost`), on a fake clock and a real tiny model: latencies
taken question by question with the retrievers taking turns, percentiles, callers at once, and encoder passes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from qrag.eval import query_cost
from qrag.eval.query_cost import (
    Fresh,
    PassCounter,
    alone,
    counted,
    pass_counter,
    price,
    rss_kb,
    summary,
    together,
)
from qrag.integrations import QRAGRetriever
from qrag.training.model.qnet import QNetwork
from tests.eval.fake_clock import FakeClock


def test_retrievers_take_turns_question_by_question_and_each_span_is_its_own() -> None:
    asked: list[tuple[str, str]] = []
    clock = FakeClock([1 / 64, 3 / 64, 2 / 64, 5 / 64])  # q1 a, q1 b, q2 a, q2 b
    got = alone({"a": lambda q: asked.append(("a", q)), "b": lambda q: asked.append(("b", q))}, ["q1", "q2"],
                clock=clock)
    assert asked == [("a", "q1"), ("b", "q1"), ("a", "q2"), ("b", "q2")]
    assert got == {"a": [1 / 64, 2 / 64], "b": [3 / 64, 5 / 64]} and clock.spent


def test_summary_reads_the_median_and_the_90th_percentile_in_milliseconds() -> None:
    xs = [k / 1000 for k in (5, 1, 3, 2, 4, 9, 7, 6, 8, 10)]
    assert summary(xs) == {"p50_ms": pytest.approx(5.5), "p90_ms": pytest.approx(9.0), "calls": 10}


def test_callers_at_once_ask_every_question_once() -> None:
    asked: list[str] = []
    latencies, wall = together(asked.append, [f"q{i}" for i in range(7)], callers=3)
    assert sorted(asked) == [f"q{i}" for i in range(7)] and len(latencies) == 7 and wall >= max(latencies) >= 0


def test_passes_are_counted_per_query(tiny_qnet: QNetwork) -> None:
    retriever = QRAGRetriever.from_texts(["Mary went to the kitchen.", "Mary took the milk.", "John is home."],
                                         tiny_qnet, k=2, max_hops=2)
    counter = PassCounter([tiny_qnet.state_tower.encoder, tiny_qnet.chunk_tower.encoder])
    hops: list[int] = []
    passes: list[int] = []
    ask = counted(retriever, hops, counter, passes)
    ask("Where is the milk?")
    ask("Where is the milk?")  # asked again: its kept question vector forgotten first, so the same passes
    assert len(hops) == 2 and hops[0] == hops[1] >= 1
    assert passes[0] == passes[1] >= 1 and counter.token_layers > 0


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_pass_counter_counts_each_served_pass_once_in_every_serving_precision(tiny_qnet: QNetwork,
                                                                               precision: str) -> None:
    qnet = tiny_qnet.eval().serve_engine().serve_in(precision)  # type: ignore[arg-type]
    retriever = QRAGRetriever.from_texts(["Mary went to the kitchen.", "Mary took the milk.", "John is home."],
                                         qnet, k=2, max_hops=2, fill="question_unguarded")
    reference = PassCounter([qnet.state_tower.encoder, qnet.chunk_tower.encoder])  # torch's passes, engines dropped
    counter = pass_counter(retriever)
    ask = counted(retriever, [], counter)
    ask("Where is the milk?")
    engine_passes = counter.passes
    qnet.drop_engines()
    qnet.serve_in("fp32")  # engines dropped first: fp32 builds none again
    counted(retriever, [], counter)("Where is the milk?")  # the same question, every pass in torch
    assert engine_passes >= 2 and counter.passes - engine_passes == engine_passes == reference.passes


class Timeline:
    """A clock that moves only when a fake retriever works: each call advances it by that retriever's cost."""

    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def retriever(self, cost: float, asked: list[str]) -> Callable[[str], None]:
        def ask(q: str) -> None:
            with self.lock:
                asked.append(q)
                self.now += cost

        return ask


def test_fresh_questions_are_disjoint_and_too_few_are_refused_by_count() -> None:
    qs = [f"q{i}" for i in range(12)] + ["q0", "q3"]  # repeats are dropped, not asked again
    fresh = Fresh.split(qs, warmup=2, alone=4, rounds=3, per_round=2)
    parts = [fresh.warmup, fresh.alone, *fresh.rounds]
    assert [len(p) for p in parts] == [2, 4, 2, 2, 2]
    flat = [q for p in parts for q in p]
    assert len(set(flat)) == len(flat) == 12
    with pytest.raises(ValueError, match="12 distinct questions, but this run asks 13"):
        Fresh.split(qs, warmup=2, alone=5, rounds=3, per_round=2)


def test_price_asks_each_retriever_every_question_once_and_reads_the_ratios() -> None:
    clock = Timeline()
    asked: dict[str, list[str]] = {"qrag": [], "plain": []}
    ask = {"qrag": clock.retriever(1 / 16, asked["qrag"]), "plain": clock.retriever(1 / 64, asked["plain"])}
    fresh = Fresh.split([f"q{i}" for i in range(20)], warmup=2, alone=6, rounds=3, per_round=4)
    got = price(ask, fresh, callers=2, clock=clock)
    for name in ask:
        assert sorted(asked[name]) == sorted(f"q{i}" for i in range(20))  # every question once, none twice
    assert got["one_at_a_time"]["qrag"] == {"p50_ms": 62.5, "p90_ms": 62.5, "calls": 6}
    assert got["one_at_a_time"]["plain"]["p50_ms"] == 15.625
    assert got["p50_ratio"] == {"plain": 4.0}
    # the calls of a round run one after another on this clock: 12 calls over 12 costs
    assert got["callers_at_once"]["qrag"]["queries_per_s"] == 16.0
    assert got["callers_at_once"]["plain"]["queries_per_s"] == 64.0
    assert got["throughput_ratio"] == {"plain": 0.25}


@pytest.mark.slow
def test_the_store_paths_searches_and_lookups_are_counted_per_call() -> None:
    from langchain_core.vectorstores import InMemoryVectorStore

    from qrag.eval.existing_collections import MiniLMEmbeddings
    from qrag.eval.price_probe import store_calls
    from tests.qrag_integrations.test_existing_collections import QUESTIONS
    from tests.qrag_integrations.test_store_safety import MANY

    texts, ids, metas = MANY
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_texts(texts, metadatas=metas, ids=ids)
    retriever = QRAGRetriever.from_vector_store(store, "qrag/hotpotqa-minilm", k=5)
    calls = store_calls(retriever)
    for q in QUESTIONS:
        retriever.invoke(q)
    hops = retriever.searcher.model.hop_settings.max_hops
    assert len(QUESTIONS) <= calls["searches"] <= hops * len(QUESTIONS)  # one search a hop
    assert 1 <= calls["lookups"] <= calls["searches"] and calls["looked_up"] >= calls["lookups"]


def test_the_resident_sizes_are_read_from_proc_and_minus_one_without_it(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1536 kB\nThreads:\t2\n", encoding="utf-8")
    real = query_cost.Path
    monkeypatch.setattr(query_cost, "Path", lambda p: status if p == "/proc/self/status" else real(p))
    assert rss_kb("VmRSS") == 1536 and rss_kb("VmHWM") == 2048
    monkeypatch.setattr(query_cost, "Path", lambda p: tmp_path / "missing")
    assert rss_kb("VmRSS") == -1
