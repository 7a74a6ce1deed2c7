"""The query-cost benchmark's readings: what a qrag query costs beside a plain retriever.

Its command line is `scripts/bench_query_cost.py`. `price` is the probe a user reads: `QRAGRetriever.from_texts` beside
LangChain's `InMemoryVectorStore` and a Chroma collection's own retriever over the same vectors, each asked every
question once (`Fresh`: warm-up, one-at-a-time and each round of callers draw disjoint questions).

Latencies are read from an injectable clock (`time.perf_counter` by default; the tests give a fake one), one query
at a time with the retrievers taking turns question by question, or from several callers at once. Encoder passes
and token-layers are counted by forward hooks; memory by the resident peak and tracemalloc.
"""

from __future__ import annotations

import ctypes
import gc
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from qrag.training.model.trunk import layers_of

if TYPE_CHECKING:
    from qrag.integrations import QRAGRetriever


class PassCounter:
    """Counts a network's encoder passes and the token-layers they run (forward hooks on the embeddings and layers;
    a CPU engine's passes, `qrag.training.model.onnx_engine`, through its listeners)."""

    def __init__(self, encoders: list[torch.nn.Module], engines: Sequence[Any] = ()) -> None:
        self.passes = 0
        self.token_layers = 0
        for engine in engines:
            found = layers_of(engine.encoder)
            layers = len(found[1]) if found is not None else 0
            engine.listeners.append(lambda ids, n=layers: self._engine_pass(ids, n))
        for encoder in encoders:
            found = layers_of(encoder)
            if found is None:
                continue
            embeddings, layers = found
            embeddings.register_forward_hook(self._pass)
            for layer in layers:
                layer.register_forward_hook(self._layer)

    def _engine_pass(self, input_ids: torch.Tensor, layers: int) -> None:
        self.passes += 1
        self.token_layers += int(input_ids.shape[0] * input_ids.shape[1]) * layers

    def _pass(self, module: Any, args: Any, output: Any) -> None:
        self.passes += 1

    def _layer(self, module: Any, args: Any, output: Any) -> None:
        hidden = args[0] if args else output[0]
        self.token_layers += int(hidden.shape[0] * hidden.shape[1])


def alone(ask: dict[str, Callable[[str], Any]], questions: list[str],
          clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Per retriever, the latency (s) of each question asked alone, the retrievers taking turns question by question."""
    out: dict[str, list[float]] = {name: [] for name in ask}
    for q in questions:
        for name, fn in ask.items():
            t0 = clock()
            fn(q)
            out[name].append(clock() - t0)
    return out


def together(fn: Callable[[str], Any], questions: list[str], callers: int,
             clock: Callable[[], float] = time.perf_counter) -> tuple[list[float], float]:
    """Latencies of `callers` threads each asking every `callers`-th question, and the wall time of them all."""
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(callers)

    def work(c: int) -> None:
        start.wait()
        for q in questions[c::callers]:
            with lock:  # a reading of a shared clock, and its pair, one thread at a time
                t0 = clock()
            fn(q)
            with lock:
                latencies.append(clock() - t0)

    threads = [threading.Thread(target=work, args=(c,)) for c in range(callers)]
    with lock:
        t0 = clock()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with lock:
        return latencies, clock() - t0


def summary(xs: list[float]) -> dict[str, float]:
    """The median and 90th percentile of latencies `xs` (s) in milliseconds, and how many there were."""
    s = sorted(xs)
    return {"p50_ms": 1e3 * statistics.median(s), "p90_ms": 1e3 * s[int(0.9 * (len(s) - 1))], "calls": len(s)}


def counted(retriever: QRAGRetriever, hops: list[int], counter: PassCounter | None = None,
            passes: list[int] | None = None, **call: Any) -> Callable[[str], Any]:
    """`retriever.invoke(q, **call)`, appending to `hops` each call's documents taken by hops (those not past the
    stop) and, with a `counter`, to `passes` the encoder passes it ran."""

    def ask(q: str) -> Any:
        forget_questions(retriever)
        before = counter.passes if counter is not None else 0
        docs = retriever.invoke(q, **call)
        hops.append(sum(not d.metadata.get("past_stop", False) for d in docs))
        if counter is not None and passes is not None:
            passes.append(counter.passes - before)
        return docs

    return ask


def forget_questions(qrag: QRAGRetriever) -> None:
    """Empty the model's kept question vectors (`f_0(q)`, kept per question across calls), so that a question asked
    again (the warm-up's, another size's, the callers' rounds) costs what a new one does; a no-op where the model
    keeps none."""
    kept = getattr(qrag.searcher.model, "_question_vectors", None)
    if kept is not None:
        kept.clear()


def pass_counter(qrag: QRAGRetriever) -> PassCounter:
    """A `PassCounter` over every encoder and CPU engine a query of `qrag` runs: both towers' and those of the served
    low-precision copies (a bf16 copy's own encoder, the int8 towers' engines over the towers' encoders), each
    counted once."""
    qnet = qrag.searcher.model
    serving: Any = getattr(qnet, "_serving", None)  # the served copies: the state tower's, and its base's
    towers = [qnet.state_tower, qnet.chunk_tower, *(t for t in (serving[1:] if serving else ()) if t is not None)]
    encoders = {id(t.encoder): t.encoder for t in towers if t.encoder is not None}
    engines = {id(e): e for t in towers if (e := t.__dict__.get("engine")) is not None}
    return PassCounter(list(encoders.values()), list(engines.values()))


def rss_kb(field: str) -> int:
    """VmRSS or VmHWM (peak resident memory since the last `reset_peak`) of this process, in kB (-1 if unread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def reset_peak() -> bool:
    """Start VmHWM again from the present resident memory (Linux `clear_refs` 5); False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def trim_heap() -> None:
    """Give the C heap's free memory back to the system (glibc `malloc_trim`), so a search's transient allocations
    show in the resident peak instead of reusing pages an earlier search left resident."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def search_memory(fn: Callable[[str], Any], questions: list[str]) -> dict[str, Any]:
    """The resident memory around these searches: before (the C heap trimmed), the peak during them (VmHWM after a
    reset), the peak above the start, and tracemalloc's peak of the Python and NumPy allocations they made (torch's own allocator
    is not traced) in a second pass over the same questions."""
    gc.collect()
    trim_heap()
    before = rss_kb("VmRSS")
    reset = reset_peak()
    for q in questions:
        fn(q)
    peak = rss_kb("VmHWM") if reset else -1
    tracemalloc.start()
    for q in questions:
        fn(q)
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"rss_before_mb": before / 1024, "rss_peak_mb": peak / 1024 if reset else None,
            "peak_above_start_mb": (peak - before) / 1024 if reset else None,
            "tracemalloc_peak_mb": traced / 2**20, "questions": len(questions)}


@dataclass(frozen=True)
class Fresh:
    """Disjoint questions for each part of a run, so that no retriever is asked a question twice: a few to warm up
    (first-call allocations), those timed one at a time, and each round of callers' own."""

    warmup: list[str]
    alone: list[str]
    rounds: list[list[str]]

    @classmethod
    def split(cls, questions: Sequence[str], *, warmup: int, alone: int, rounds: int, per_round: int) -> Fresh:
        """The first distinct `questions`, in order: `warmup`, then `alone`, then `rounds` slices of `per_round`.

        Raises:
            ValueError: fewer distinct questions than the run asks.
        """
        distinct = list(dict.fromkeys(questions))
        need = warmup + alone + rounds * per_round
        if len(distinct) < need:
            raise ValueError(f"{len(distinct)} distinct questions, but this run asks {need} (warm-up {warmup}, one at a "
                             f"time {alone}, {rounds} rounds of {per_round}) and never asks one twice: build more "
                             "questions or ask fewer.")
        at = warmup + alone
        return cls(distinct[:warmup], distinct[warmup:at],
                   [distinct[at + r * per_round: at + (r + 1) * per_round] for r in range(rounds)])


def price(ask: dict[str, Callable[[str], Any]], fresh: Fresh, *, callers: int, reference: str = "qrag",
          clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Each retriever of `ask` warmed up, then timed one at a time (taking turns question by question), then by
    `callers` threads at once, round by round (the retrievers alternating within a round, each round new questions).

    Returns:
        {'one_at_a_time': name -> summary, 'callers_at_once': name -> summary and queries_per_s,
         'p50_ratio' / 'throughput_ratio': other name -> `reference`'s p50 (throughput) over its}.
    """
    for fn in ask.values():
        for q in fresh.warmup:
            fn(q)
    one = {name: summary(xs) for name, xs in alone(ask, fresh.alone, clock).items()}
    lat: dict[str, list[float]] = {name: [] for name in ask}
    wall = dict.fromkeys(ask, 0.0)
    for questions in fresh.rounds:
        for name, fn in ask.items():
            got, spent = together(fn, questions, callers, clock)
            lat[name] += got
            wall[name] += spent
    many = {name: {**summary(xs), "queries_per_s": len(xs) / wall[name]} for name, xs in lat.items()}
    others = [n for n in ask if n != reference]
    return {"one_at_a_time": one, "callers_at_once": many,
            "p50_ratio": {n: one[reference]["p50_ms"] / one[n]["p50_ms"] for n in others},
            "throughput_ratio": {n: many[reference]["queries_per_s"] / many[n]["queries_per_s"] for n in others}}


__all__ = ["Fresh", "PassCounter", "alone", "counted", "forget_questions", "pass_counter", "price", "reset_peak",
           "rss_kb", "search_memory", "summary", "together", "trim_heap"]
