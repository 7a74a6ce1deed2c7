"""What indexing passages leaves in a process's memory, with the CPU engine's arena handed back or kept.

`from_texts`' large passes hand their working memory back as shipped (`onnx_engine.SHRINK_TOKENS`); each round
indexes a fresh slice of the passages once each way, in alternating order, and reads the process's resident size
after each (VmRSS, `query_cost.rss_kb`): ONNX Runtime's arena keeps the largest pass it ran, so the
size after a kept round is what a server holds from then on, and after a shrinking round what it holds as shipped.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from qrag.eval.query_cost import rss_kb
from qrag.training.model import onnx_engine

MODES = ("shrink", "keep")


def index_rounds(texts: Sequence[str], index: Callable[[Sequence[str]], Any], *, rounds: int, size: int,
                 clock: Callable[[], float] = time.perf_counter,
                 resident: Callable[[], int] = lambda: rss_kb("VmRSS")) -> dict[str, Any]:
    """`rounds` rounds of `index(slice)` each way over slices of `size` passages no round reads twice.

    Returns:
        {"rounds": [{"mode", "passages", "seconds", "resident_kib"}...], "median_seconds": {mode: s},
        "median_resident_kib": {mode: KiB}, "seconds_ratio": keep's median over shrink's}.

    Raises:
        ValueError: fewer than `2 * rounds * size` passages.
    """
    if rounds < 1 or size < 1 or len(texts) < 2 * rounds * size:
        raise ValueError(f"{rounds} rounds of {size} passages each way need {2 * rounds * size} passages; got "
                         f"{len(texts)}: pass fewer rounds or a smaller size.")
    shipped, rows = onnx_engine.SHRINK_TOKENS, []
    try:
        for r in range(rounds):
            for m, mode in enumerate(MODES if r % 2 else MODES[::-1]):
                onnx_engine.SHRINK_TOKENS = shipped if mode == "shrink" else 1 << 62
                part = texts[(2 * r + m) * size:][:size]
                tick = clock()
                index(part)
                rows.append({"mode": mode, "passages": len(part), "seconds": clock() - tick,
                             "resident_kib": resident()})
    finally:
        onnx_engine.SHRINK_TOKENS = shipped
    seconds = {mode: statistics.median(x["seconds"] for x in rows if x["mode"] == mode) for mode in MODES}
    kib = {mode: statistics.median(x["resident_kib"] for x in rows if x["mode"] == mode) for mode in MODES}
    return {"rounds": rows, "median_seconds": seconds, "median_resident_kib": kib,
            "seconds_ratio": seconds["keep"] / seconds["shrink"] if seconds["shrink"] else None,
            "shrink_tokens": shipped}


__all__ = ["MODES", "index_rounds"]
