"""HotpotQA, 2Wiki, MuSiQue and the custom format read from hand-written fixtures in each official schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qrag.training.data import load_episodes
from qrag.training.data.episode import EpisodeError

FIXTURES = Path(__file__).parent / "fixtures"


def test_hotpotqa_distractor() -> None:
    eps = load_episodes("hotpotqa", path=str(FIXTURES / "hotpot_dev_distractor.json"))
    assert len(eps) == 2
    a, b = eps
    assert a.id == "5a8b57f25542995d1e6f1371" and a.answer == "yes"
    assert a.num_chunks == 4 and a.supporting == (1, 3)
    assert a.chunks[3] == "Scott Derrickson. Scott Derrickson is an American director, screenwriter and producer. He lives in Los Angeles, California."
    assert a.metadata["type"] == "comparison"
    assert b.supporting == (0, 1) and b.answer == "Chief of Protocol"


def test_2wiki_uses_the_hotpot_schema() -> None:
    (ep,) = load_episodes("2wiki", path=str(FIXTURES / "2wiki_dev.json"))
    assert ep.supporting == (0, 1) and ep.num_chunks == 3 and ep.answer == "Małgorzata Braunek"
    assert ep.metadata["source"] == "2wiki"


def test_musique_maps_decomposition_support_and_skips_unanswerable() -> None:
    (ep,) = load_episodes("musique", path=str(FIXTURES / "musique_ans_v1.0_dev.jsonl"))
    assert ep.id == "2hop__153573_109006" and ep.answer == "Kampala"
    assert ep.num_chunks == 4 and ep.supporting == (1, 3)
    assert ep.chunks[3] == "Uganda. Uganda borders Lake Victoria."
    assert ep.metadata["answer_aliases"] == ["Kampala City"]


def test_custom_jsonl_both_forms() -> None:
    per = load_episodes("jsonl", path=str(FIXTURES / "custom_episodes.jsonl"))
    assert [e.supporting for e in per] == [(0, 2), (0,)]
    assert per[1].id == "custom_episodes-3"  # line number when no id
    q1, q2 = load_episodes("jsonl", path=str(FIXTURES / "custom_corpus.jsonl"))
    assert q1.chunks == ("Paris. Paris is the capital of France.", "The Seine flows through Paris.",
                         "Lyon. Lyon lies at the confluence of the Rhône and the Saône.")
    assert q1.supporting == (0, 1) and q1.answer == "the Seine"
    assert q2.supporting == (2,) and q2.answer is None and q2.chunks is q1.chunks


def test_a_supporting_title_missing_from_the_paragraphs(tmp_path: Path) -> None:
    recs = json.loads((FIXTURES / "hotpot_dev_distractor.json").read_text())
    recs[1]["supporting_facts"].append(["Nowhere Film", 0])
    bad = tmp_path / "hotpot.json"
    bad.write_text(json.dumps(recs))
    with pytest.raises(EpisodeError, match=r"hotpot.json: record 1: supporting title 'Nowhere Film' is not among"):
        load_episodes("hotpotqa", path=str(bad))


def test_files_in_the_wrong_schema() -> None:
    with pytest.raises(EpisodeError, match=r"squad_v2_dev.json: expected a JSON list of records"):
        load_episodes("hotpotqa", path=str(FIXTURES / "squad_v2_dev.json"))
    with pytest.raises(EpisodeError, match=r"hotpot_dev_distractor.json:.*not a MuSiQue record.*paragraphs"):
        load_episodes("musique", path=str(FIXTURES / "hotpot_dev_distractor.json"))
    with pytest.raises(EpisodeError, match=r"musique_ans_v1.0_dev.jsonl:1: not a HotpotQA-schema record"):
        load_episodes("hotpotqa", path=str(FIXTURES / "musique_ans_v1.0_dev.jsonl"))


def test_malformed_lines_give_file_and_line(tmp_path: Path) -> None:
    m = tmp_path / "m.jsonl"
    m.write_text((FIXTURES / "musique_ans_v1.0_dev.jsonl").read_text().splitlines()[0] + "\n{oops\n")
    with pytest.raises(EpisodeError, match=r"m.jsonl:2: malformed JSON"):
        load_episodes("musique", path=str(m))
    rec = json.loads((FIXTURES / "musique_ans_v1.0_dev.jsonl").read_text().splitlines()[0])
    rec["question_decomposition"][0]["paragraph_support_idx"] = 17
    m.write_text(json.dumps(rec) + "\n")
    with pytest.raises(EpisodeError, match=r"m.jsonl:1: paragraph_support_idx 17 names no paragraph"):
        load_episodes("musique", path=str(m))
    c = tmp_path / "c.jsonl"
    c.write_text('{"passage_id": "p1", "text": "A."}\n{"question": "Q?", "supporting_ids": ["p9"]}\n')
    with pytest.raises(EpisodeError, match=r"c.jsonl:2: supporting id 'p9' names no passage"):
        load_episodes("jsonl", path=str(c))
    e = tmp_path / "e.jsonl"
    e.write_text('{"question": "Q?", "chunks": ["a"], "supporting": [0]}\n{"question": "Q?", "chunks": ["a"], "supporting": [3]}\n')
    with pytest.raises(EpisodeError, match=r"e.jsonl:2: .*supporting index 3"):
        load_episodes("jsonl", path=str(e))
