"""The living-index benchmark's measures run end to end on a tiny model, and report the spans of the clock they are
given, exactly (the figures themselves are in RESULTS)."""

from __future__ import annotations

from qrag.eval.living_speed import (
    add_one_cost,
    add_versus_build,
    distinct_texts,
    filtered_after_add,
    filtered_hop_times,
    living_table,
    mask_memory,
    synthetic_index,
    update_costs,
)
from qrag.training.model.qnet import QNetwork
from tests.eval.fake_clock import FakeClock


def test_the_hop_rows_and_the_add_row_hold_what_the_table_prints(tiny_qnet: QNetwork) -> None:
    index = synthetic_index(tiny_qnet, 50)
    assert len(index) == 50 and index.metadatas[13] == {"group": 3}
    # Spans, in seconds: the mask; then per kind of hop (plain, filtered, predicate) each question's three rounds.
    clock = FakeClock([0.125, 1 / 64, 1 / 64, 5 / 64, 7 / 64, 8 / 64, 1 / 64,  # plain: medians 1/64 and 7/64
                       1 / 32, 1 / 16, 1 / 64, 1 / 32, 1 / 32, 1 / 32,  # filtered: 1/32 and 1/32
                       0.25, 0.5, 0.125, 0.5, 0.5, 0.5])  # predicate: 0.25 and 0.5
    hops = filtered_hop_times(tiny_qnet, [300], ["where is the milk?", "who has the ball?"], repeats=3, clock=clock)
    assert clock.spent
    assert hops == [{"chunks": 300, "hop_ms": 62.5, "filtered_hop_ms": 31.25, "predicate_hop_ms": 375.0,
                     "mask_build_ms": 125.0, "filtered_over_plain": 0.5}]  # the median of two questions: their mean
    texts = [f"{w} went to the {p}." for w in ("Mary", "John", "Bob") for p in ("park", "shop", "farm", "lake")]
    clock = FakeClock([4.0, 0.5, 1.0])  # the build from scratch, embedding the added alone, the add
    grow = add_versus_build(tiny_qnet, texts[:9], texts[9:], ["where is Mary?"], clock=clock)
    assert clock.spent and grow == {"base": 9, "added": 3, "build_s": 4.0, "add_s": 1.0, "embed_added_s": 0.5,
                                    "add_over_build": 0.25, "add_over_embed": 2.0, "same_rankings": True,
                                    "precision": "fp32"}
    table = living_table(hops, grow)
    assert "| 300 |" in table and "| 9 | 3 |" in table


def test_the_update_add_one_and_memory_rows(tiny_qnet: QNetwork) -> None:
    passages = [f"{w} went to the {p}." for w in ("Mary", "John") for p in ("park", "shop", "farm")]
    texts = distinct_texts(passages, 14)
    assert len(set(texts)) == 14 and texts[:6] == passages and texts[6] == "Mary went to the park. (1)"
    clock = FakeClock([0.25, 2.0, 0.5, 2.0, 0.25, 4.0, 1.0, 4.0])  # per (base, added): the add, then the build
    updates = update_costs(tiny_qnet, passages, [20, 40], [1, 5], repeats=1, clock=clock)
    assert clock.spent
    assert [(r["base"], r["added"], r["add_s"], r["build_s"], r["add_over_build"]) for r in updates] == [
        (20, 1, 0.25, 2.0, 0.125), (20, 5, 0.5, 2.0, 0.25), (40, 1, 0.25, 4.0, 0.0625), (40, 5, 1.0, 4.0, 0.25)]
    clock = FakeClock([0.5, 0.125, 0.25, 0.0625, 1.0, 0.25])  # per passage added: its embedding, then its add
    one = add_one_cost(tiny_qnet, passages * 3, [10], adds=3, clock=clock)
    assert clock.spent and one == [{"chunks": 10, "add_one_ms": 125.0, "embed_one_ms": 500.0}]
    unbounded, bounded = mask_memory(tiny_qnet, 500, 80)
    assert unbounded["masks_held"] == 80 and bounded["masks_held"] == 64 == bounded["mask_cache_size"]
    assert bounded["masks_mib"] == 64 * 500 / 2**20


def test_the_hop_after_an_add_against_the_hop_before_it(tiny_qnet: QNetwork) -> None:
    # Per round the hop before the add, after it and with a new filter; then per round the two masks.
    clock = FakeClock([1 / 64, 2 / 64, 0.25, 2 / 64, 4 / 64, 0.5, 3 / 64, 3 / 64, 0.125,
                       1 / 1024, 0.125, 1 / 512, 0.0625, 1 / 256, 0.25])
    rows = filtered_after_add(tiny_qnet, [200], ["where is the milk?", "who has the ball?"], repeats=3, clock=clock)
    assert clock.spent
    assert rows == [{"chunks": 200, "tenants": 100, "before_add_ms": 31.25, "after_add_ms": 46.875,
                     "after_over_before": 1.5, "new_filter_ms": 250.0, "new_filter_over_before": 8.0,
                     "before_add_each_ms": [15.625, 31.25, 46.875], "after_add_each_ms": [31.25, 62.5, 46.875],
                     "mask_after_add_ms": 1.953125, "new_mask_ms": 125.0}]
