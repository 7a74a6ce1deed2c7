"""Concurrent searches share encoder passes: the states of callers that arrive together are encoded in one batch.

A served model is one set of weights that many threads search with (`QRAGRetriever.invoke` from a thread pool,
`ainvoke` through one). Its encoder passes run one at a time (`towers.model_lock`: one pass already uses the
intra-op threads, and the fast tokenizers refuse concurrent calls). A `StateBatcher` turns that queue into batches,
as text-embeddings-inference and vLLM do: every hop's state encoding is a request; while one pass runs, the requests
of other callers wait, and the next pass encodes all of them at once (up to `max_batch` states, in groups of similar
length so a bare question is not padded to a state holding passages), then hands each caller its rows. Callers at
different hops of their searches share passes.

With one intra-op thread (`torch.set_num_threads(1)`, the serving advice for one process per core) a pass leaves
the machine's other cores idle, so up to `parallel` passes run at once (default: the cores over torch's intra-op
threads, at most `MAX_PARALLEL`); only the tokenisation holds the model's lock (a network's gradient-free passes
may run in several threads). With torch's default threads one pass runs at a time, as before.

A caller alone never waits: it finds no pass running and encodes at once. `batch_wait_ms` (default 2, 0: never)
lets a pass wait that long for company, and only while another search is under way that has not yet asked (a
search is counted from `searching()`, which `MultiHopSearcher.search` enters): the company it gathers saves a pass.

The vectors are those of encoding each caller's states alone, up to float rounding: padding is masked out of
attention and of pooling (tests/training/search/test_state_batcher.py compares them).

Shape legend: R state rows, D vector dim.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from qrag.training.model.qnet import QNetwork
from qrag.training.model.towers import model_lock

BATCH_WAIT_MS = 2.0
"""How long a pass waits for other searches' states (only while one is under way and has not asked yet)."""
MAX_BATCH = 64
"""Most states one shared pass encodes."""
MAX_PARALLEL = 4
"""Most passes of one model that run at once (fewer where the cores are fewer: `parallel`)."""
LENGTH_RATIO = 2.0
"""States of one pass are encoded in groups whose longest is at most this many times their shortest (in characters,
the order `embed_states` sorts by): a bare question is not padded to a state holding passages."""


@dataclass
class _Request:
    questions: Sequence[str]
    pieces: Sequence[Sequence[str]]
    batch_size: int
    vectors: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False


class StateBatcher:
    """One model's queue of state encodings (`state_batcher(model)` gives the shared one).

    Args:
        model: The network whose `embed_states` encodes (a `QNetwork`, or anything with that method).
        batch_wait_ms: How long a pass may wait for other searches' states, in milliseconds (0: never waits).
        max_batch: Most states one pass encodes.
        parallel: Most passes at once; None: the cores over torch's intra-op threads (at most `MAX_PARALLEL`), read
            at every pass (a server sets its threads after loading the model).

    Example:
        >>> from qrag.training.search.state_batcher import state_batcher
        >>> state_batcher(model).batch_wait_ms = 0  # doctest: +SKIP  (share passes, never wait)
    """

    def __init__(self, model: Any, batch_wait_ms: float = BATCH_WAIT_MS, max_batch: int = MAX_BATCH,
                 parallel: int | None = None) -> None:
        self._model = weakref.ref(model)  # the registry's key: a strong reference would keep every model alive
        self.batch_wait_ms = batch_wait_ms
        self.max_batch = max_batch
        self.parallel = parallel
        self._cond = threading.Condition()
        self._queue: list[_Request] = []
        self._running = 0  # passes under way
        self._encoding = 0  # requests those passes encode
        self._searching: dict[int, int] = {}  # thread id → searches it has under way
        self.passes = 0  # shared passes run (how many requests they served: `requests`)
        self.requests = 0

    @property
    def model(self) -> Any:
        """The network this batcher encodes with (its searchers and adapters hold it; the batcher does not)."""
        model = self._model()
        if model is None:
            raise RuntimeError("this StateBatcher's model was freed; take the batcher of the model you search with "
                               "(state_batcher(model)).")
        return model

    @contextlib.contextmanager
    def searching(self) -> Iterator[None]:
        """Count the calling thread's search as under way for the block (a pass may wait for its states)."""
        me = threading.get_ident()
        with self._cond:
            self._searching[me] = self._searching.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._searching[me] -= 1
                if not self._searching[me]:
                    del self._searching[me]
                self._cond.notify_all()

    def encode(self, questions: Sequence[str], pieces: Sequence[Sequence[str]], batch_size: int = 128) -> torch.Tensor:
        """(R, D) state vectors of `questions[r]` after taking the texts `pieces[r]`, as `embed_states` gives them,
        encoded in one pass with whatever other callers ask meanwhile."""
        req = _Request(questions, pieces, batch_size)
        with self._cond:
            self._queue.append(req)
            while not req.done:
                if req not in self._queue or self._running >= self._passes():
                    self._cond.wait()  # its pass is under way, or as many passes as may run
                    continue
                self._running += 1
                batch: list[_Request] = []
                try:
                    batch = self._gather()
                    self._encoding += len(batch)
                    self._cond.release()
                    try:
                        self._run(batch)
                    finally:
                        self._cond.acquire()
                finally:
                    self._running -= 1
                    self._encoding -= len(batch)
                    self._cond.notify_all()
        if req.error is not None:
            raise req.error
        assert req.vectors is not None
        return req.vectors

    def _gather(self) -> list[_Request]:
        """The requests the next pass encodes (the caller holds the condition): waits up to `batch_wait_ms` while a
        search under way has not asked, then takes requests from the front up to `max_batch` states."""
        deadline = time.monotonic() + self.batch_wait_ms / 1e3
        while self.batch_wait_ms > 0 and self._rows() < self.max_batch and self._absent():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        batch: list[_Request] = []
        rows = 0
        while self._queue and (not batch or rows + len(self._queue[0].questions) <= self.max_batch):
            req = self._queue.pop(0)
            batch.append(req)
            rows += len(req.questions)
        return batch

    def _rows(self) -> int:
        return sum(len(r.questions) for r in self._queue)

    def _absent(self) -> int:
        """Searches under way that have no request queued or being encoded."""
        return max(0, sum(self._searching.values()) - len(self._queue) - self._encoding)

    def _passes(self) -> int:
        """How many passes may run at once."""
        if self.parallel is not None:
            return max(1, self.parallel)
        return max(1, min(MAX_PARALLEL, (os.cpu_count() or 1) // max(1, torch.get_num_threads())))

    def _run(self, batch: list[_Request]) -> None:
        """Encode every request of `batch` in passes of similar length, and hand each its rows.

        A merged pass that fails is not every caller's failure (a pass of many states can run out of memory where
        each alone would not): each request is then encoded alone, and gets its own vectors or its own error."""
        model = self.model
        questions = [q for r in batch for q in r.questions]
        pieces = [p for r in batch for p in r.pieces]
        try:
            vectors = _encode_grouped(model, questions, pieces, max(r.batch_size for r in batch), len(batch) > 1)
        except Exception as e:
            if len(batch) == 1:
                batch[0].error, batch[0].done = e, True
                return
            for r in batch:  # each caller alone: its own vectors, or its own error
                try:
                    r.vectors = _encode_grouped(model, list(r.questions), list(r.pieces), r.batch_size, False)
                except Exception as own:  # noqa: BLE001 - handed to its caller, raised in its thread
                    r.error = own
                r.done = True
                self.passes += 1
                self.requests += 1
            return
        except BaseException:  # KeyboardInterrupt, SystemExit: stop every caller of the pass, each with its own
            for r in batch:
                r.error, r.done = RuntimeError("the shared state pass was interrupted"), True
            raise
        self.passes += 1
        self.requests += len(batch)
        start = 0
        for r in batch:
            r.vectors, r.done = vectors[start : start + len(r.questions)], True
            start += len(r.questions)


def _encode_grouped(model: Any, questions: list[str], pieces: list[Sequence[str]], batch_size: int,
                    group: bool) -> torch.Tensor:
    """(R, D) `model.embed_states` of the rows, with `group` in groups whose character lengths are within
    `LENGTH_RATIO` (a caller alone: its states exactly as `embed_states` batches them). A `QNetwork` holds its lock
    only to tokenise; anything else holds it throughout."""
    if isinstance(model, QNetwork):
        def embed(qs: list[str], ps: list[Sequence[str]]) -> torch.Tensor:
            return model.embed_states(qs, ps, batch_size=batch_size, tokenize_lock=model_lock(model))
    else:
        def embed(qs: list[str], ps: list[Sequence[str]]) -> torch.Tensor:
            with model_lock(model):
                return model.embed_states(qs, ps, batch_size=batch_size)  # type: ignore[no-any-return]
    if not group:
        return embed(questions, pieces)
    lengths = [len(q) + sum(len(c) for c in p) for q, p in zip(questions, pieces, strict=True)]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[i] <= LENGTH_RATIO * max(1, lengths[groups[-1][0]]):
            groups[-1].append(i)
        else:
            groups.append([i])
    if len(groups) == 1:
        return embed(questions, pieces)
    out: torch.Tensor | None = None
    for g in groups:
        v = embed([questions[i] for i in g], [pieces[i] for i in g])  # (G, D)
        if out is None:
            out = v.new_empty(len(questions), v.shape[1])
        out[torch.tensor(g, device=v.device)] = v
    assert out is not None
    return out


_BATCHERS: weakref.WeakKeyDictionary[Any, StateBatcher] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def state_batcher(model: Any) -> StateBatcher:
    """The `StateBatcher` every searcher and adapter of `model` shares (made on first use, with the defaults)."""
    with _GUARD:
        batcher = _BATCHERS.get(model)
        if batcher is None:
            batcher = _BATCHERS[model] = StateBatcher(model)
        return batcher
