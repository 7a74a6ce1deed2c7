"""Whether a bf16 copy or the int8 graphs serve a CPU's query passes faster than the fp32 tower: timed, once.

The flags say whether a CPU *can* run bf16 natively (`qrag.training.model.precision`), not whether that is faster for
a query. A one-question state is a small matrix product, and on some CPUs that list `avx512_bf16` the fp32 path
wins there: on a 2-core Xeon (family 6, model 207; AMX not exposed to it), at one thread, a `from_texts` query's p50
was 117.2 ms served in bf16 against 112.0 ms in fp32, a state pass 42.3 ms against 35.4 (docs/RESULTS.md, "The
paragraph model's price"). ONNX Runtime's int8 graphs (`qrag.training.model.onnx_engine`) run on every x86 CPU with
AVX2, at a speed that depends on its integer instructions (VNNI or not). Indexing, a large batch, is not decided here
(`precision.indexing_precision`).

So `serve_in('auto')` on a CPU times a query's passes through the fp32 tower and through each precision it is
offered (bf16 where the flags allow it, int8 where its graphs build), a question of `QUESTION_TOKENS` tokens and a
state of `STATE_TOKENS`, interleaved, `REPEATS` times after a warm-up, and keeps the fastest only where its median is
at most `GAIN` of fp32's (a clear gain; otherwise fp32, the exact arithmetic). The fp32 tower's passes run as they
will serve: through its CPU engine where it has one (the bf16 copy runs in torch). The verdict is kept per process
for each tower shape, torch thread count, engine and set of offered precisions, so a process measures once. An
explicit precision is never second-guessed.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping

import torch

from qrag.training.model.towers import Precision, Tower

QUESTION_TOKENS = 20
"""Tokens of the timed question (a first hop's state)."""
STATE_TOKENS = 80
"""Tokens of the timed state: a question and the first 64 tokens of one passage, a second hop's state."""
REPEATS = 5
"""Timed passes of each tower (after one warm-up pass each)."""
GAIN = 0.9
"""A lower precision serves only where its median pass takes at most this fraction of fp32's."""

_VERDICTS: dict[tuple[object, ...], tuple[Precision, str]] = {}
_VERDICTS_LOCK = threading.Lock()


def timed_pass(tower: Tower, inputs: dict[str, torch.Tensor]) -> float:
    """Seconds one gradient-free pass of `tower` over `inputs` takes."""
    start = time.perf_counter()
    with torch.no_grad():
        tower(**inputs)
    return time.perf_counter() - start


def _key(tower: Tower) -> tuple[int, ...]:
    """What the verdict depends on: the tower's parameter shapes, torch's intra-op threads and its CPU engine."""
    return (torch.get_num_threads(), int(tower.engine is not None), *(n for p in tower.parameters() for n in p.shape))


def faster_serving(fp32_tower: Tower, offered: Mapping[Precision, Callable[[], Tower | None]], vocab_size: int,
                   timer: Callable[[Tower, dict[str, torch.Tensor]], float] | None = None) -> tuple[Precision, str]:
    """(the precision, why) serving `fp32_tower`'s state passes on a CPU: of the precisions `offered` (each name →
    its tower, made only when there is no verdict yet; None where it cannot run), the one whose median timed pass is
    the lowest, if at most `GAIN` of fp32's, else 'fp32' (module docstring). Kept per process; `timer` times one pass
    (default `timed_pass`)."""
    timer = timer or timed_pass
    key = (*_key(fp32_tower), *sorted(offered))
    with _VERDICTS_LOCK:
        if key in _VERDICTS:
            return _VERDICTS[key]
        towers: dict[Precision, Tower] = {name: t for name, make in offered.items() if (t := make()) is not None}
        gen = torch.Generator().manual_seed(0)
        shapes = [torch.randint(1, max(vocab_size, 2), (1, n), generator=gen) for n in (QUESTION_TOKENS, STATE_TOKENS)]
        passes = [{"input_ids": ids, "attention_mask": torch.ones_like(ids)} for ids in shapes]
        seconds: dict[str, list[float]] = {name: [] for name in ("fp32", *towers)}
        for i in range(REPEATS + 1):  # the first of each is the warm-up
            spent = dict.fromkeys(seconds, 0.0)
            for inputs in passes:
                spent["fp32"] += timer(fp32_tower, inputs)
                for name, tower in towers.items():
                    spent[name] += timer(tower, inputs)
            if i:
                for kind, took in spent.items():
                    seconds[kind].append(took)
        median = {name: statistics.median(took) for name, took in seconds.items()}
        best = min(towers, key=median.__getitem__, default=None)
        chosen: Precision = best if best is not None and median[best] <= GAIN * median["fp32"] else "fp32"
        engine = " (its CPU engine)" if fp32_tower.engine is not None else ""
        others = ", ".join(f"{1000 * median[name]:.1f} ms in {name}" for name in towers)
        why = (f"a {QUESTION_TOKENS}-token question and an {STATE_TOKENS}-token state took "
               f"{others + ' and ' if others else ''}{1000 * median['fp32']:.1f} ms in fp32{engine} on this CPU "
               f"({torch.get_num_threads()} torch threads): {chosen} serves")
        _VERDICTS[key] = (chosen, why)
        return chosen, why


def forget_verdicts() -> None:
    """Drop every kept verdict (the next `serve_in('auto')` times again)."""
    with _VERDICTS_LOCK:
        _VERDICTS.clear()
