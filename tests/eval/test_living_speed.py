"""The living-index benchmark's measures run end to end on a tiny model (the figures themselves are in RESULTS)."""

from __future__ import annotations

from qrag.eval.living_speed import (
    add_one_cost,
    add_versus_build,
    distinct_texts,
    filtered_hop_times,
    living_table,
    mask_memory,
    synthetic_index,
    update_costs,
)
from qrag.training.model.qnet import QNetwork


def test_the_hop_rows_and_the_add_row_hold_what_the_table_prints(tiny_qnet: QNetwork) -> None:
    index = synthetic_index(tiny_qnet, 50)
    assert len(index) == 50 and index.metadatas[13] == {"group": 3}
    hops = filtered_hop_times(tiny_qnet, [300], ["where is the milk?", "who has the ball?"], repeats=1)
    assert [r["chunks"] for r in hops] == [300] and all(r["hop_ms"] > 0 and r["mask_build_ms"] >= 0 for r in hops)
    texts = [f"{w} went to the {p}." for w in ("Mary", "John", "Bob") for p in ("park", "shop", "farm", "lake")]
    grow = add_versus_build(tiny_qnet, texts[:9], texts[9:], ["where is Mary?"])
    assert grow["base"] == 9 and grow["added"] == 3 and grow["same_rankings"] is True and grow["embed_added_s"] > 0
    table = living_table(hops, grow)
    assert "| 300 |" in table and "| 9 | 3 |" in table


def test_the_update_add_one_and_memory_rows(tiny_qnet: QNetwork) -> None:
    passages = [f"{w} went to the {p}." for w in ("Mary", "John") for p in ("park", "shop", "farm")]
    texts = distinct_texts(passages, 14)
    assert len(set(texts)) == 14 and texts[:6] == passages and texts[6] == "Mary went to the park. (1)"
    updates = update_costs(tiny_qnet, passages, [20, 40], [1, 5], repeats=1)
    assert [(r["base"], r["added"]) for r in updates] == [(20, 1), (20, 5), (40, 1), (40, 5)]
    assert all(r["add_s"] > 0 and r["build_s"] > 0 for r in updates)
    one = add_one_cost(tiny_qnet, passages * 3, [10], adds=3)
    assert [r["chunks"] for r in one] == [10] and one[0]["add_one_ms"] > 0 and one[0]["embed_one_ms"] > 0
    unbounded, bounded = mask_memory(tiny_qnet, 500, 80)
    assert unbounded["masks_held"] == 80 and bounded["masks_held"] == 64 == bounded["mask_cache_size"]
    assert bounded["masks_mib"] == 64 * 500 / 2**20
