"""RULER: the 8 NIAH subtasks (needles, keys, values, haystacks, gold sentences) and QA padding."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from qrag.training.data import load_episodes
from qrag.training.data.ruler import DEPTHS, NIAH_CONFIGS, NIAH_TASKS, NOISE, niah_episode

FIXTURES = Path(__file__).parent / "fixtures"
NEEDLE = re.compile(r"^One of the special magic (numbers|uuids|words) for (\S+) is: (\S+)\.$")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"


@pytest.mark.parametrize("task", NIAH_TASKS)
def test_niah_gold_sentences_hold_exactly_the_gold_values(task: str) -> None:
    cfg = NIAH_CONFIGS[task]  # type: ignore[index]
    for seed in range(3):
        ep = niah_episode(task, random.Random(seed), num_sentences=120)
        assert ep.num_chunks == 120
        needles = [m.groups() for c in ep.chunks if (m := NEEDLE.match(c))]
        queried = re.findall(r"for (.+) mentioned", ep.question)[0].replace(", and ", ", ").split(", ")
        assert len(queried) == cfg.num_queries
        gold = [v for _, k, v in needles if k in queried]
        assert gold and sorted(gold) == sorted(ep.metadata["answers"])
        assert len(gold) == cfg.num_queries * cfg.num_values
        assert [NEEDLE.match(ep.chunks[i]).group(3) for i in ep.supporting] == [  # type: ignore[union-attr]
            v for _, k, v in needles if k in queried
        ]
        value_re = {"numbers": r"\d{7}", "uuids": UUID, "words": r"[a-z]+-[a-z]+"}
        for kind, key, value in needles:
            assert kind == cfg.value and re.fullmatch(value_re[cfg.value], value)
            assert re.fullmatch(value_re[cfg.key], key)
        if cfg.haystack == "noise":
            assert {c for c in ep.chunks if not NEEDLE.match(c)} <= set(NOISE)
        elif cfg.haystack == "needle":
            assert len(needles) == 120 and len({k for _, k, _ in needles}) == 120
        else:
            assert len(needles) == cfg.num_keys * cfg.num_values


def test_needles_sit_at_the_40_depths() -> None:
    ep = niah_episode("niah_single_2", random.Random(0), num_sentences=391)  # 390 haystack sentences
    (i,) = ep.supporting
    assert any(round(d / 100 * 390) == i for d in DEPTHS)


def test_niah_token_budget_and_errors() -> None:
    (ep,) = load_episodes("ruler_niah", task="niah_single_1", num_tokens="2k", num_samples=1)
    assert 2000 <= ep.metadata["num_tokens"] < 2100
    with pytest.raises(ValueError, match="too small for niah_multivalue's 4 needles"):
        niah_episode("niah_multivalue", random.Random(0), num_sentences=3)
    with pytest.raises(ValueError, match=r"'niah_single_4'.*niah_single_1"):
        niah_episode("niah_single_4", random.Random(0), num_sentences=30)


def test_ruler_qa_1_squad_padded_with_distractors() -> None:
    eps = load_episodes("ruler_qa", task="qa_1", path=str(FIXTURES / "squad_v2_dev.json"), num_docs=3)
    assert [e.answer for e in eps] == ["France", "major political, cultural and military",
                                       "Computational complexity theory"]  # the impossible question is skipped
    for e in eps:
        assert e.num_chunks == 3 and len(e.supporting) == 1
        assert all(c.startswith(f"Document {i + 1}:\n") for i, c in enumerate(e.chunks))
        assert e.answer in e.chunks[e.supporting[0]]
    assert eps[0].chunks[eps[0].supporting[0]].split("\n")[1] == "Normans"


def test_ruler_qa_2_hotpot_gold_are_the_supporting_paragraphs() -> None:
    eps = load_episodes("ruler_qa", task="qa_2", path=str(FIXTURES / "hotpot_dev_distractor.json"), num_docs=7)
    assert len(eps) == 2 and all(e.num_chunks == 7 for e in eps)
    titles = [{e.chunks[i].split("\n")[1] for i in e.supporting} for e in eps]
    assert titles == [{"Scott Derrickson", "Ed Wood"}, {"Kiss and Tell (1945 film)", "Shirley Temple"}]
    with pytest.raises(ValueError, match=r"'qa_3'.*qa_1, qa_2"):
        load_episodes("ruler_qa", task="qa_3", path=str(FIXTURES / "squad_v2_dev.json"))
