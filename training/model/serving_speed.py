"""Whether a bf16 copy of the state tower serves a CPU's query passes faster than the fp32 tower: timed, once.

The flags say whether a CPU *can* run bf16 natively (`qrag.training.model.precision`), not whether that is faster for
a query. A one-question state is a small matrix product, and on some CPUs that list `avx512_bf16` the fp32 path
wins there: on a 2-core Xeon (family 6, model 207; AMX not exposed to it), at one thread, a `from_texts` query's p50
was 117.2 ms served in bf16 against 112.0 ms in fp32, a state pass 42.3 ms against 35.4 (docs/RESULTS.md, "The
paragraph model's price"). Indexing, a large batch, is not
decided here (`precision.indexing_precision`).

So where the flags allow bf16, `serve_in('auto')` times a query's passes through each tower, a question of
`QUESTION_TOKENS` tokens and a state of `STATE_TOKENS`, interleaved, `REPEATS` times after a warm-up, and keeps bf16
only where its median is at most `BF16_GAIN` of fp32's (a clear gain; otherwise fp32, the exact arithmetic). The fp32
tower's passes run as they will serve: through its CPU engine where it has one (`qrag.training.model.onnx_engine`;
the bf16 copy runs in torch). The verdict is kept per process for each tower shape, torch thread count and engine, so
a process measures once. An explicit `'bf16'` or `'fp32'` is never second-guessed.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

import torch

from qrag.training.model.towers import Precision, Tower

QUESTION_TOKENS = 20
"""Tokens of the timed question (a first hop's state)."""
STATE_TOKENS = 80
"""Tokens of the timed state: a question and the first 64 tokens of one passage, a second hop's state."""
REPEATS = 5
"""Timed passes of each tower (after one warm-up pass each)."""
BF16_GAIN = 0.9
"""bf16 serves only where its median pass takes at most this fraction of fp32's."""

_VERDICTS: dict[tuple[int, ...], tuple[Precision, str]] = {}
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


def faster_serving(fp32_tower: Tower, bf16_copy: Callable[[], Tower], vocab_size: int,
                   timer: Callable[[Tower, dict[str, torch.Tensor]], float] | None = None) -> tuple[Precision, str]:
    """('bf16' or 'fp32', why) for serving `fp32_tower`'s state passes on a CPU with native bf16, `bf16_copy()` its
    bf16 copy (asked for only when there is no verdict yet): bf16 where its median timed pass is at most `BF16_GAIN`
    of fp32's (module docstring). Kept per process for the tower's shape and the thread count; `timer` times one
    pass (default `timed_pass`)."""
    timer = timer or timed_pass
    key = _key(fp32_tower)
    with _VERDICTS_LOCK:
        if key in _VERDICTS:
            return _VERDICTS[key]
        bf16_tower = bf16_copy()
        gen = torch.Generator().manual_seed(0)
        shapes = [torch.randint(1, max(vocab_size, 2), (1, n), generator=gen) for n in (QUESTION_TOKENS, STATE_TOKENS)]
        passes = [{"input_ids": ids, "attention_mask": torch.ones_like(ids)} for ids in shapes]
        fp32_s: list[float] = []
        bf16_s: list[float] = []
        for i in range(REPEATS + 1):  # the first of each is the warm-up
            fp32 = bf16 = 0.0
            for inputs in passes:
                fp32, bf16 = fp32 + timer(fp32_tower, inputs), bf16 + timer(bf16_tower, inputs)
            if i:
                fp32_s.append(fp32)
                bf16_s.append(bf16)
        fp32_med, bf16_med = statistics.median(fp32_s), statistics.median(bf16_s)
        chosen: Precision = "bf16" if bf16_med <= BF16_GAIN * fp32_med else "fp32"
        engine = " (its CPU engine)" if fp32_tower.engine is not None else ""
        why = (f"a {QUESTION_TOKENS}-token question and an {STATE_TOKENS}-token state took {1000 * bf16_med:.1f} ms in "
               f"bf16 and {1000 * fp32_med:.1f} ms in fp32{engine} on this CPU ({torch.get_num_threads()} torch "
               f"threads): {chosen} serves")
        _VERDICTS[key] = (chosen, why)
        return chosen, why


def forget_verdicts() -> None:
    """Drop every kept verdict (the next `serve_in('auto')` times again)."""
    with _VERDICTS_LOCK:
        _VERDICTS.clear()
