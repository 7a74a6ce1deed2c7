"""Searches whose outputs were recorded before the hops were brought to their compute floor (issue 77).

`tests/fixtures/search_outputs.json` holds, for every shipped model and every state anchor, the ids, hops,
Q-values and scores of greedy and beam searches over real text: FanOutQA test questions over 48 Wikipedia
summaries for the paragraph model, a bAbI story for the bAbI models; k=None and k=5; every fill. It was recorded at
commit 8aa0937, before any change to the passes a hop runs; `test_recorded_outputs.py` checks that today's searches
return the same ids in the same order with Q-values and scores within 1e-5.

Regenerate (only when a change of results is intended, and say why in the commit):

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python -m tests.training.search.recorded_outputs
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "search_outputs.json"

PARAGRAPH_QUESTIONS = [
    "What are the top five populated countries in the world and what is their largest city?",
    "Which colleges did the past 5 presidents get their undergraduate degree from?",
    "What are the lengths in kilometers of the Nile, Amazon, Yangtze, Mississippi, and Danube rivers?",
    "Who are the CEOs of the five most valuable public corporations by market capitalization?",
]
PARAGRAPH_TITLES = [
    "China", "India", "Indonesia", "Pakistan", "United States", "Barack Obama", "Donald Trump", "George W. Bush",
    "Amazon River", "Danube", "Mississippi River", "Nile", "Yangtze", "Apple Inc.", "Microsoft",
]
PARAGRAPHS = 48


def paragraph_texts() -> list[str]:
    """The gold summaries of `PARAGRAPH_QUESTIONS` and the first others by title, 48 in all ("{title}. {text}")."""
    from qrag.training.data.wiki import read_pages

    pages = read_pages()
    titles = list(PARAGRAPH_TITLES) + [t for t in pages if t not in PARAGRAPH_TITLES]
    return [f"{t}. {pages[t].text}" for t in titles[:PARAGRAPHS]]


def babi_story() -> tuple[list[str], list[str]]:
    """A qa2 story's facts and three of its questions (seed 0)."""
    from qrag.training.data.babi import generate_samples

    samples = generate_samples("qa2", 12, seed=0)
    last = max(samples, key=lambda s: len(s.facts))
    questions = [s.question for s in samples if s.facts == last.facts[: len(s.facts)]][-3:]
    return list(last.facts), questions


@dataclass(frozen=True)
class Case:
    """One model setting: a shipped model, with `anchor` set on it when not None, searched over `text`."""

    model: str
    anchor: str | None
    text: str  # 'paragraphs' | 'babi'

    @property
    def name(self) -> str:
        return f"{self.model}:{self.anchor or 'saved'}"


CASES = [
    Case("qrag/hotpotqa-minilm", None, "paragraphs"),  # its own anchor: 'question'
    *(Case("qrag/hotpotqa-minilm", a, "paragraphs") for a in ("none", "first_hop", "passages")),
    Case("qrag/babilong-minilm", None, "babi"),  # anchor 'none'
    Case("qrag/babilong-minilm-cpu", None, "babi"),  # anchor 'none'
    *(Case("qrag/babilong-minilm-cpu", a, "babi") for a in ("question", "first_hop", "passages")),
]

SEARCHES: list[dict[str, Any]] = [
    {"k": None},
    {"k": 5, "fill": "state"},
    {"k": 5, "fill": "question"},
    {"k": 5, "fill": "question_unguarded"},
    {"k": 5, "fill": "question", "beam_size": 2},
    {"k": 5, "fill": "state", "beam_size": 2},
    {"k": None, "beam_size": 2},
]
"""Each search's overrides of the model's saved settings (the first, `{"k": None}`, is its adaptive search)."""


def searcher_of(case: Case) -> tuple[Any, list[str]]:
    """A `MultiHopSearcher` for `case` over its text, and the questions to ask it."""
    from qrag.training.search import ChunkIndex, MultiHopSearcher, load_model

    model = load_model(case.model)
    # recorded with every state piece at 128 tokens: the paragraph model reads 64 of each passage since 2026-12-02
    model.config.max_state_passage_tokens = None
    if case.anchor is not None:
        model.config.state_anchor = case.anchor  # type: ignore[assignment]
    if case.text == "paragraphs":
        texts, questions = paragraph_texts(), PARAGRAPH_QUESTIONS
    else:
        texts, questions = babi_story()
    index = ChunkIndex.from_texts(model, texts, ordered=case.text == "babi")
    return MultiHopSearcher(model, index, ordered=case.text == "babi"), questions


def outputs(searcher: Any, questions: list[str], which: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """Every search of `SEARCHES` (those at `which`, when given) on `questions`: the overrides and per question its
    hits (id, hop, Q, score, past the stop rule)."""
    for overrides in SEARCHES if which is None else [SEARCHES[i] for i in which]:
        results = searcher.search(questions, **overrides)
        yield {"overrides": overrides, "results": [
            [[h.chunk.id, h.hop, h.q_value, h.score, h.past_stop] for h in r.hits] for r in results]}


def record() -> dict[str, Any]:
    return {case.name: list(outputs(*searcher_of(case))) for case in CASES}


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    FIXTURE.write_text(json.dumps({"recorded_at": "8aa0937", "cases": record()}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
