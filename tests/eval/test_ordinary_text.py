"""The ordinary-text benchmark (`qrag-eval ordinary-text`): its loaders on hand-written SQuAD-format and MultiRC
files (tests/eval/ordinary_text/), its metrics hand-computed, and the whole command on the tiny network, offline."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from qrag.eval.cli import main as eval_main
from qrag.eval.ordinary_text import fact_scores, run_multirc, run_squad, squad_scores, table
from qrag.eval.ordinary_text_data import (
    OrdinaryTextError,
    load_multirc,
    load_squad,
    paragraph_half,
    parse_multirc_input,
)

DATA = Path(__file__).parent / "ordinary_text"
SQUAD = DATA / "squad_tiny.json"
MULTIRC = DATA / "multirc_tiny.json"
LIGHTHOUSE = "The lighthouse at Kessel Point was built in 1872 from granite quarried on the island."


def test_squad_pool_is_every_distinct_paragraph_and_each_question_its_own() -> None:
    pool = load_squad(SQUAD, num_questions=None)
    assert len(pool.passages) == 4  # the lighthouse paragraph twice in the file is one passage; the tent has no question
    assert pool.passages[0] == LIGHTHOUSE and pool.passages[3].startswith("Our tent")
    assert pool.ids == ("q1", "q2", "q3", "q4", "q5")
    assert pool.gold == (0, 0, 1, 2, 0)  # q5 was written on the repeated lighthouse paragraph: row 0
    assert pool.total_questions == 5


def test_squad_draw_is_seeded_and_kept_in_file_order() -> None:
    a, b = load_squad(SQUAD, num_questions=3, seed=7), load_squad(SQUAD, num_questions=3, seed=7)
    assert a == b and len(a.questions) == 3 and list(a.ids) == sorted(a.ids)
    assert load_squad(SQUAD, num_questions=99).ids == load_squad(SQUAD, num_questions=None).ids
    assert len(a.passages) == 4  # the pool is the whole file whatever is drawn


def test_bad_files_name_themselves(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{\"paragraphs\": []}")
    with pytest.raises(OrdinaryTextError, match="no top-level 'data'"):
        load_squad(bad)
    with pytest.raises(OrdinaryTextError, match="cannot be read"):
        load_squad(tmp_path / "missing.json")
    with pytest.raises(OrdinaryTextError, match="no 'examples'"):
        load_multirc(bad)
    with pytest.raises(OrdinaryTextError, match="half must be"):
        load_multirc(MULTIRC, half="left")  # type: ignore[arg-type]


def test_paragraph_half_is_the_parity_of_the_first_sentences_sha1() -> None:
    for sentence in ("The museum opened a new wing.", "Anna planted tomatoes in the spring."):
        digest = int(hashlib.sha1(sentence.encode("utf-8")).hexdigest(), 16)
        assert paragraph_half(sentence) == ("even" if digest % 2 == 0 else "odd")
    assert paragraph_half("The museum opened a new wing.") == "even"  # sha1 ...66
    assert paragraph_half("Anna planted tomatoes in the spring.") == "odd"  # sha1 ...b1


def test_multirc_input_parses_into_sentences_and_question() -> None:
    sentences, question = parse_multirc_input("Sent 1: A b. Sent 2: C d: e. Question: Why f?")
    assert sentences == ["A b.", "C d: e."] and question == "Why f?"
    with pytest.raises(OrdinaryTextError, match="in order"):
        parse_multirc_input("Sent 2: A. Sent 1: B. Question: C?")
    with pytest.raises(OrdinaryTextError, match="no 'Question:'"):
        parse_multirc_input("Sent 1: A.")


def test_multirc_halves_split_by_paragraph_and_the_other_half_is_not_parsed() -> None:
    even = load_multirc(MULTIRC, "even")
    # The museum (2 questions) and the rain paragraph; the rain question naming a 9th sentence is skipped.
    assert [q.id for q in even] == ["0", "1", "2"]
    assert even[0].supporting == (1, 2) and even[1].supporting == (0, 3) and even[2].supporting == (1, 2)
    assert even[0].sentences[2] == "Varga was born in Pecs." and even[0].question.startswith("Where was")
    # The odd half holds a malformed example: reading the even half never parses it; reading the odd half does.
    with pytest.raises(OrdinaryTextError, match="in order"):
        load_multirc(MULTIRC, "odd")
    assert {q.id for q in load_multirc(MULTIRC, "even", num_questions=2, seed=1)} < {"0", "1", "2"}


def test_metrics_by_hand() -> None:
    assert squad_scores([4, 2, 7], gold=2, k=1) == {"recall@1": 0.0, "mrr@1": 0.0}
    assert squad_scores([4, 2, 7], gold=2, k=2) == {"recall@2": 1.0, "mrr@2": 0.5}
    assert squad_scores([4, 2, 7], gold=9, k=10) == {"recall@10": 0.0, "mrr@10": 0.0}
    assert fact_scores([3, 1], [1, 3]) == {"fact_em": 1.0, "recall": 1.0}
    assert fact_scores([3, 0, 5], [1, 3, 5]) == {"fact_em": 0.0, "recall": pytest.approx(2 / 3)}


def test_squad_part_on_the_tiny_network(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    pool = load_squad(SQUAD, num_questions=None)
    with torch.no_grad():
        part = run_squad(pool, tiny_qnet, tiny_qnet, ks=(1, 2, 3))
    assert set(part["means"]) == {"cosine", "bm25", "hybrid", "qrag"}
    assert part["passages"] == 4 and part["questions"] == 5
    bm25 = part["means"]["bm25"]
    # Every question shares a rare word with its gold paragraph only ("Kessel", "lighthouse", "ferries", "lid",
    # "quarried"), so BM25 ranks it first.
    assert bm25["hit@1"] == bm25["recall@1"] == bm25["mrr@3"] == 1.0
    for rec in part["records"]:
        for k in ("1", "2", "3"):
            assert len(rec["qrag"][k]) == int(k)  # an exact-k search returns k passages
        assert rec["bm25"][0] == rec["gold"]
    d, half = part["margins"]["qrag"]["bm25"]["recall@3"]
    assert d <= 0 and half >= 0
    assert "hybrid" not in part["margins"]["hybrid"]
    text = table(part, ["hit@1", "recall@2"], "bm25")
    assert "| bm25 | 1.000 | 1.000 |" in text and "| qrag |" in text


def test_multirc_part_searches_each_paragraph_for_exactly_sf(tiny_qnet) -> None:  # type: ignore[no-untyped-def]
    questions = load_multirc(MULTIRC, "even")
    with torch.no_grad():
        part = run_multirc(questions, {"tiny": tiny_qnet}, tiny_qnet)
    assert part["questions"] == 3 and part["paragraphs"] == 2
    for rec, q in zip(part["records"], questions, strict=True):
        for m in ("cosine", "bm25", "tiny"):
            assert len(rec[m]) == len(q.supporting) and set(rec[m]) <= set(range(len(q.sentences)))
    assert set(part["margins"]["tiny"]) == {"cosine", "bm25"}
    assert 0.0 <= part["means"]["bm25"]["fact_em"] <= part["means"]["bm25"]["recall"] <= 1.0


def test_command_writes_summary_records_and_table(tmp_path: Path, tiny_checkpoint: Path,
                                                  tiny_encoder_path: Path) -> None:
    out = tmp_path / "run"
    code = eval_main(["ordinary-text", "--squad", str(SQUAD), "--multirc", str(MULTIRC), "--model", str(tiny_checkpoint),
                      "--encoder", str(tiny_encoder_path), "--sentence-models", "", "--ks", "1,2", "--out", str(out),
                      "--search", "lexical_weight=0"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["parts"]) == {"squad_tiny", "multirc"} and summary["search"] == {"lexical_weight": 0}
    assert summary["long_chunks"] == "windows"  # passages searched as the retrievers index them
    assert summary["machine"]["threads"] >= 1
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 5 + 3
    assert "margins vs hybrid" in (out / "table.md").read_text()


def test_command_refuses_a_run_without_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_main(["ordinary-text", "--out", str(tmp_path / "x")]) == 2
    assert "--squad FILE" in capsys.readouterr().err
    assert eval_main(["ordinary-text", "--squad", str(SQUAD), "--num-questions", "0", "--out", str(tmp_path)]) == 2
