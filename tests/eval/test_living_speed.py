"""The living-index benchmark's measures run end to end on a tiny model (the figures themselves are in RESULTS)."""

from __future__ import annotations

from qrag.eval.living_speed import add_versus_build, filtered_hop_times, living_table, synthetic_index
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
