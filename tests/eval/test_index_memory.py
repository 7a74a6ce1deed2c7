"""`qrag.eval.index_memory`: rounds that alternate the two modes over fresh slices, with a fake clock and sizes."""

from __future__ import annotations

import itertools

import pytest

from qrag.eval.index_memory import index_rounds
from qrag.training.model import onnx_engine


def test_each_round_indexes_fresh_passages_both_ways_and_the_shipped_limit_comes_back() -> None:
    shipped = onnx_engine.SHRINK_TOKENS
    seen: list[tuple[list[str], int]] = []
    ticks = itertools.count()
    sizes = iter([3000, 1200, 1300, 3100, 2900, 1250])  # in the order the modes alternate (asserted below)

    def index(part: list[str]) -> None:
        seen.append((list(part), onnx_engine.SHRINK_TOKENS))
        next(ticks)  # the index takes one tick more than the clock's own

    got = index_rounds([f"p{i}" for i in range(14)], index, rounds=3, size=2, clock=lambda: float(next(ticks)),
                       resident=lambda: next(sizes))
    assert [r["mode"] for r in got["rounds"]] == ["keep", "shrink", "shrink", "keep", "keep", "shrink"]
    passages = [p for part, _ in seen for p in part]
    assert passages == [f"p{i}" for i in range(12)]  # no passage twice, each slice 2
    assert [limit == shipped for _, limit in seen] == [False, True, True, False, False, True]
    assert onnx_engine.SHRINK_TOKENS == shipped
    assert got["median_seconds"] == {"shrink": 2.0, "keep": 2.0} and got["seconds_ratio"] == 1.0
    assert got["median_resident_kib"] == {"keep": 3000, "shrink": 1250}


def test_the_shipped_limit_comes_back_when_an_index_fails_and_too_few_passages_are_named() -> None:
    shipped = onnx_engine.SHRINK_TOKENS

    def fails(part: object) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        index_rounds(["a", "b", "c", "d"], fails, rounds=1, size=2)
    assert onnx_engine.SHRINK_TOKENS == shipped
    with pytest.raises(ValueError, match="need 8 passages; got 4"):
        index_rounds(["a", "b", "c", "d"], fails, rounds=2, size=2)
