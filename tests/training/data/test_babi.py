"""bAbI qa1–qa5: the generator's stories replay to their answers; the original text format reads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from qrag.training.data.babi import ACTORS, DROP_VERBS, TASKS, generate_samples, infer_sample, read_babi_file
from qrag.training.data.episode import EpisodeError
from tests.training.data.babi_replay import replay

FIXTURES = Path(__file__).parent / "fixtures"
FACT_RANGES = {"qa1": (2, 10), "qa2": (2, 68), "qa3": (4, 32), "qa4": (2, 2), "qa5": (2, 126)}
NUM_SUPPORT = {"qa1": {1}, "qa2": {2}, "qa3": {3}, "qa4": {2}, "qa5": {1}}


@pytest.fixture(scope="module", params=TASKS)
def task_samples(request: pytest.FixtureRequest) -> tuple[str, list]:
    return request.param, generate_samples(request.param, 400, seed=3)


def test_every_story_replays_to_its_answer_and_the_support_alone_decides(task_samples: tuple[str, list]) -> None:
    task, samples = task_samples
    for s in samples:
        assert replay(s.facts, s.question, strict=True) == s.answer, (s.facts, s.question)
        alone = [s.facts[i] for i in s.supporting]
        assert replay(alone, s.question, strict=False) == s.answer, (alone, s.question)
        assert len(s.supporting) in NUM_SUPPORT[task]
        assert list(s.supporting) == sorted(set(s.supporting))


def test_fact_counts_stay_in_the_original_ranges(task_samples: tuple[str, list]) -> None:
    task, samples = task_samples
    lo, hi = FACT_RANGES[task]
    counts = [len(s.facts) for s in samples]
    assert lo <= min(counts) and max(counts) <= hi
    if task != "qa4":
        assert len(set(counts)) > 4, "fact counts should vary"


def test_answers_and_verbs_vary() -> None:
    answers = Counter(s.answer for s in generate_samples("qa1", 300, seed=0))
    assert len(answers) == 6
    verbs = {f.split(" the ")[0].split(" ", 1)[1] for s in generate_samples("qa2", 300, seed=0) for f in s.facts}
    assert {"went to", "journeyed to", "travelled to", "moved to", "went back to"} <= verbs
    assert {"got", "grabbed", "took", "picked up", "dropped", "put down", "discarded", "left"} <= verbs
    q5 = {s.question.split()[0] + " " + s.question.split()[1] for s in generate_samples("qa5", 200, seed=0)}
    assert q5 == {"Who gave", "What did", "Who received", "Who did"}


def test_train_and_test_streams_differ_and_each_is_deterministic() -> None:
    train = generate_samples("qa2", 50, seed=0, split="train")
    assert train == generate_samples("qa2", 50, seed=0, split="train")
    test = generate_samples("qa2", 50, seed=0, split="test")
    assert not {(s.facts, s.question) for s in train} & {(s.facts, s.question) for s in test}
    assert generate_samples("qa2", 20, seed=0) == train[:20]


def test_unknown_task_is_named() -> None:
    with pytest.raises(ValueError, match=r"'qa9'.*qa1, qa2, qa3, qa4, qa5"):
        generate_samples("qa9", 1)


def test_infer_sample_recovers_answer_and_support() -> None:
    facts = ["Mary moved to the bathroom.", "John went to the hallway.", "Mary got the milk there.",
             "Mary journeyed to the office."]
    assert infer_sample("qa2", facts, "Where is the milk?") == ("office", (2, 3))
    with pytest.raises(ValueError, match="without a defined answer"):
        infer_sample("qa2", facts, "Where is the apple?")


def test_reads_the_original_text_format() -> None:
    samples = read_babi_file(FIXTURES / "qa2_two-supporting-facts_test.txt")
    assert [s.answer for s in samples] == ["garden", "garden", "hallway"]
    assert samples[0].task == "qa2"
    assert len(samples[0].facts) == 6 and samples[0].supporting == (2, 5)
    # question lines are not facts: line 10 is the 9th statement of the story
    assert len(samples[1].facts) == 9 and samples[1].supporting == (5, 8)
    assert samples[2].facts == ("Daniel took the apple there.", "Daniel travelled to the hallway.")
    assert samples[2].supporting == (0, 1)
    for s in samples:
        assert replay(s.facts, s.question, strict=True) == s.answer


def test_bad_babi_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        read_babi_file(tmp_path / "nope.txt")
    bad = tmp_path / "qa1_bad.txt"
    bad.write_text("1 Mary moved to the hallway.\n2 Where is Mary?\thallway\t7\n")
    with pytest.raises(EpisodeError, match=r"qa1_bad.txt:2: supporting id '7'"):
        read_babi_file(bad)
    bad.write_text("Mary moved to the hallway.\n")
    with pytest.raises(EpisodeError, match=r"qa1_bad.txt:1: expected 'ID text'"):
        read_babi_file(bad)


def test_qa3_support_is_babi_s_latest_object_event() -> None:
    # The example: bAbI labels the put-down (the object's latest event), the move into the
    # garden and the move before it, not the pick-up that began the carry.
    facts = ["Daniel took the football there.", "Mary went to the office.", "Daniel moved to the bathroom.",
             "Daniel travelled to the garden.", "Daniel put down the football."]
    assert infer_sample("qa3", facts, "Where was the football before the garden?") == ("bathroom", (2, 3, 4))
    # Still held: the get is the latest event.
    assert infer_sample("qa3", facts[:4], "Where was the football before the garden?") == ("bathroom", (0, 2, 3))
    # Dropped, then picked up again where it lies: the latest hold never carried it, so undefined.
    again = [*facts, "Daniel got the football there."]
    with pytest.raises(ValueError, match="without a defined answer"):
        infer_sample("qa3", again, "Where was the football before the garden?")
    # Someone else picks it up and carries it on: the new carry is asked about.
    other = [*facts, "Mary went to the garden.", "Mary grabbed the football there.", "Mary went to the kitchen."]
    assert infer_sample("qa3", other, "Where was the football before the kitchen?") == ("garden", (5, 6, 7))


def test_qa3_labels_follow_the_latest_object_event_in_generated_samples() -> None:
    samples = generate_samples("qa3", 300, seed=1)
    last_is_drop = 0
    for s in samples:
        obj = s.question.split()[3]
        events = [i for i, f in enumerate(s.facts) if f" the {obj}" in f and " to the " not in f]
        assert events[-1] in s.supporting, (s.facts, s.question, s.supporting)
        last_is_drop += s.facts[events[-1]].startswith(tuple(f"{a} {v}" for a in ACTORS for v in DROP_VERBS))
    assert 0.2 < last_is_drop / len(samples) < 0.8, last_is_drop  # both kinds of latest event occur
