"""The figures of the existing-collections benchmark, on hand-made result lists."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from qrag.eval.existing_collections import _scores, compare, table


def _docs(*pairs: tuple[str, float]) -> list[Document]:
    return [Document(page_content=i, id=i, metadata={"q_value": q}) for i, q in pairs]


def test_compare_counts_same_ordered_ids_and_the_largest_dq_where_ids_meet() -> None:
    ref = [_docs(("a", 0.5), ("b", 0.4)), _docs(("c", 0.3), ("d", 0.2))]
    got = [_docs(("a", 0.5 + 1e-6), ("b", 0.4)), _docs(("d", 0.9), ("c", 0.2 + 0.01))]
    out = compare(got, ref)
    assert out["same_ids"] == 0.5  # the second question's order differs
    assert out["max_abs_dq"] == pytest.approx(1e-6)  # only positions holding the same id count
    assert out["positions_compared"] == 2


def test_recall_and_hit_at_one_read_the_gold_id() -> None:
    found = [_docs(("a", 1), ("g", 1)), _docs(("g", 1)), []]
    assert _scores(found, ["g", "g", "g"], 2) == {"recall@2": pytest.approx(2 / 3), "hit@1": pytest.approx(1 / 3)}
    assert _scores(found, ["g", "g", "g"], 1)["recall@1"] == pytest.approx(1 / 3)


def test_table_names_each_method_against_its_own_reference() -> None:
    row = {"recall@5": 0.9, "hit@1": 0.8, "against": {"from_texts_cut_q_alone": {"same_ids": 1.0, "max_abs_dq": 3e-7}}}
    text = table({"k": 5, "methods": {"chroma_l2_q_alone": row}})
    assert "| chroma_l2_q_alone | 0.9000 | 0.8000 | — / 1.000 | 3.0e-07 |" in text
