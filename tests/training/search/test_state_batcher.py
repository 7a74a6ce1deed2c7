"""Concurrent searches share encoder passes (`state_batcher`): the same hits as searching one at a time, fewer passes
than requests, a caller alone never waits, an encoder error reaches each caller as its own, a merged pass that fails
falls back to each caller alone, and a batcher never keeps its model alive."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher
from qrag.training.search.state_batcher import StateBatcher, state_batcher
from tests.training.search.test_search import QUESTIONS, TEXTS

CALLERS = 6


class SlowPasses:
    """Wraps `embed_states` so that each pass takes a while: the other callers queue meanwhile (no timing asserted)."""

    def __init__(self, model: Any, seconds: float = 0.05) -> None:
        self.inner, self.seconds, self.calls = model.embed_states, seconds, 0
        self.running = self.most_at_once = 0
        self._lock = threading.Lock()

    def __call__(self, questions: Sequence[str], pieces: Sequence[Sequence[str]], batch_size: int = 128,
                 **options: Any) -> torch.Tensor:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(self.seconds)
        try:
            return self.inner(questions, pieces, batch_size=batch_size, **options)  # type: ignore[no-any-return]
        finally:
            with self._lock:
                self.running -= 1


def ask_together(searcher: MultiHopSearcher, questions: list[str], **overrides: Any) -> list[Any]:
    out: list[Any] = [None] * len(questions)
    start = threading.Barrier(len(questions))

    def work(i: int) -> None:
        start.wait()
        out[i] = searcher.search_one(questions[i], **overrides)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(questions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("overrides", [{"k": 4, "max_hops": 3}, {"k": 4, "max_hops": 2, "fill": "question"}])
def test_concurrent_searches_share_passes_and_return_what_one_at_a_time_does(tiny_qnet, overrides) -> None:  # type: ignore[no-untyped-def]
    searcher = MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, TEXTS))
    questions = [QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else " Now?") for i in range(CALLERS)]
    alone = [searcher.search_one(q, **overrides) for q in questions]
    batcher = state_batcher(tiny_qnet)
    batcher.passes = batcher.requests = 0
    tiny_qnet.embed_states = SlowPasses(tiny_qnet)
    together = ask_together(searcher, questions, **overrides)
    assert batcher.passes < batcher.requests  # some pass encoded several callers' states
    for a, b in zip(alone, together, strict=True):
        assert [(h.chunk.id, h.hop) for h in a.hits] == [(h.chunk.id, h.hop) for h in b.hits]
        for x, y in zip(a.hits, b.hits, strict=True):
            assert x.q_value == pytest.approx(y.q_value, abs=1e-5)
            assert x.score == pytest.approx(y.score, abs=1e-5)


@pytest.mark.parametrize("parallel", [1, 2])
def test_at_most_parallel_passes_run_at_once(tiny_qnet, parallel: int) -> None:  # type: ignore[no-untyped-def]
    searcher = MultiHopSearcher(tiny_qnet, ChunkIndex.from_texts(tiny_qnet, TEXTS))
    alone = [searcher.search_one(q, k=3, max_hops=2) for q in QUESTIONS]
    state_batcher(tiny_qnet).parallel = parallel
    state_batcher(tiny_qnet).batch_wait_ms = 0  # the first pass goes alone: the others queue behind it
    passes = tiny_qnet.embed_states = SlowPasses(tiny_qnet)
    together = ask_together(searcher, QUESTIONS, k=3, max_hops=2)
    assert passes.most_at_once == parallel
    assert [[h.chunk.id for h in r.hits] for r in together] == [[h.chunk.id for h in r.hits] for r in alone]


def test_a_caller_alone_never_waits(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    batcher = StateBatcher(tiny_qnet, batch_wait_ms=60_000)

    def no_wait(timeout: float | None = None) -> bool:
        raise AssertionError("a caller alone waited for company")

    batcher._cond.wait = no_wait  # type: ignore[method-assign]
    with batcher.searching():
        got = batcher.encode(["Where is the milk?"], [["Mary took the milk there."]])
    want = tiny_qnet.embed_states(["Where is the milk?"], [["Mary took the milk there."]])
    assert torch.equal(got, want)


def test_an_encoder_error_reaches_every_caller_of_its_pass_as_its_own(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    batcher = StateBatcher(tiny_qnet, batch_wait_ms=0, parallel=1)  # one pass at a time: the others queue behind it
    gate = threading.Event()
    calls = 0

    def failing(questions: Sequence[str], pieces: Sequence[Sequence[str]], batch_size: int = 128,
                **options: Any) -> torch.Tensor:
        nonlocal calls
        calls += 1
        gate.wait(5)  # the first pass holds the queue until every caller has asked
        raise RuntimeError("encoder broke")

    tiny_qnet.embed_states = failing
    errors: list[BaseException] = []

    def work(q: str) -> None:
        try:
            batcher.encode([q], [[]])
        except RuntimeError as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(q,)) for q in QUESTIONS]
    threads[0].start()
    deadline = time.monotonic() + 30  # a bound on the waits below, never a timing asserted
    while calls < 1 and time.monotonic() < deadline:  # the first caller's pass is running
        time.sleep(0.005)
    for t in threads[1:]:
        t.start()
    while len(batcher._queue) < len(QUESTIONS) - 1 and time.monotonic() < deadline:  # the others queue behind it
        time.sleep(0.005)
    assert len(batcher._queue) == len(QUESTIONS) - 1, "the other callers did not queue behind the first pass"
    gate.set()
    for t in threads:
        t.join()
    # the merged pass failed, then each of its callers was encoded alone: each raised its own error object (a
    # traceback that grows only in its own thread)
    assert len(errors) == len(QUESTIONS) and calls == 2 + len(QUESTIONS) - 1
    assert len({id(e) for e in errors}) == len(QUESTIONS)


def test_a_merged_pass_that_fails_gives_each_caller_its_own_result(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    """A pass of several callers' states that runs out of memory, where each caller alone would not: every caller
    still gets its vectors (those of encoding it alone), and one caller whose own pass fails gets only its error."""
    want = {q: tiny_qnet.embed_states([q], [[]]) for q in QUESTIONS}
    inner = tiny_qnet.embed_states
    batcher = StateBatcher(tiny_qnet, batch_wait_ms=0, parallel=1)
    gate = threading.Event()
    bad = QUESTIONS[-1]

    def picky(questions: Sequence[str], pieces: Sequence[Sequence[str]], batch_size: int = 128,
              **options: Any) -> torch.Tensor:
        gate.wait(5)
        if len(questions) > 1:
            raise MemoryError("a pass of several states ran out of memory")
        if questions[0] == bad:
            raise ValueError(f"cannot encode {questions[0]!r}")
        return inner(questions, pieces, batch_size=batch_size, **options)  # type: ignore[no-any-return]

    tiny_qnet.embed_states = picky
    got: dict[str, Any] = {}

    def work(q: str) -> None:
        try:
            got[q] = batcher.encode([q], [[]])
        except Exception as e:  # noqa: BLE001 - recorded per caller
            got[q] = e

    threads = [threading.Thread(target=work, args=(q,)) for q in QUESTIONS]
    threads[0].start()
    deadline = time.monotonic() + 30  # a bound on the waits below, never a timing asserted
    while not batcher._running and time.monotonic() < deadline:
        time.sleep(0.005)
    for t in threads[1:]:
        t.start()
    while len(batcher._queue) < len(QUESTIONS) - 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    gate.set()
    for t in threads:
        t.join()
    assert isinstance(got[bad], ValueError) and bad in str(got[bad])
    for q in QUESTIONS[:-1]:
        assert isinstance(got[q], torch.Tensor), got[q]
        torch.testing.assert_close(got[q], want[q], atol=1e-5, rtol=1e-5)


def test_a_batcher_never_keeps_its_model_alive(tiny_encoder_path) -> None:  # type: ignore[no-untyped-def]
    from qrag.training.model.qnet import QNetwork

    qnet = QNetwork.from_encoder(str(tiny_encoder_path)).eval()
    state_batcher(qnet).encode(["Where is the milk?"], [[]])
    gone = weakref.ref(qnet)
    del qnet
    gc.collect()
    assert gone() is None  # searched once, then freed with its last reference
