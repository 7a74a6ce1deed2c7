"""Evaluation metrics (METHOD.md §5, BENCHMARKS.md): pure functions, no model, no I/O.

Retrieval metrics compare retrieved chunk indices with the gold supporting indices `SF`. Answer metrics
compare a reader's output with the gold answer; every text comparison is case-insensitive and on whole
words (the released BabiLong code is case-sensitive and matches "one" inside "none"; we do not).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Collection, Iterable, Sequence

ROOMS = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
DIRECTIONS = ("north", "south", "east", "west")
BABILONG_LABELS: dict[str, tuple[str, ...]] = {
    "qa1": ROOMS + DIRECTIONS,
    "qa2": ROOMS + DIRECTIONS,
    "qa3": ROOMS + DIRECTIONS,
    "qa4": ROOMS + DIRECTIONS,
    "qa5": ("bill", "fred", "jeff", "mary", "apple", "football", "milk"),
}
"""Per bAbI task, the answer labels the label-matching metric looks for (BENCHMARKS.md §2)."""

FINAL_ANSWER = "final answer:"


# --------------------------------------------------------------------------- comparisons
def paired_margin(a: Sequence[float], b: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Mean of `a[i] − b[i]` over paired samples and the half-width of its normal-approximation interval.

    `z` = 1.96 gives a 95% interval; the standard error is the sample standard deviation of the
    differences over √n. With n < 2 the half-width is infinite (no spread can be estimated).

    Raises:
        ValueError: the two lists differ in length or are empty.
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_margin needs two equally long, non-empty lists, got {len(a)} and {len(b)}.")
    d = [x - y for x, y in zip(a, b, strict=True)]
    n = len(d)
    mean = sum(d) / n
    if n < 2:
        return mean, float("inf")
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    return mean, z * (var / n) ** 0.5


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a success rate, `successes` of `n` trials (z = 1.96: 95%).

    Unlike mean ± z·se it stays within [0, 1] and keeps a width at 0 or 1 successes, which a few dozen samples per
    cell need: 27 of 27 is (0.875, 1.0), not 1.0 ± 0.

    Raises:
        ValueError: `n` below 1 or `successes` outside [0, n].
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval needs 0 <= successes <= n and n >= 1, got {successes} of {n}.")
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


# --------------------------------------------------------------------------- retrieval
def fact_scores(retrieved: Sequence[int], gold: Collection[int]) -> dict[str, float]:
    """Set precision, recall, F1 and EM (gold ⊆ retrieved) of retrieved chunk indices (METHOD.md §5).

    Args:
        retrieved: Retrieved chunk indices (order ignored; repeats counted once).
        gold: Gold supporting indices `SF`; must not be empty.

    Returns:
        {"fact_precision", "fact_recall", "fact_f1", "fact_em"}; precision is 0 when nothing was retrieved.

    Raises:
        ValueError: `gold` is empty (fact metrics are undefined for an unlabelled episode).
    """
    g = set(gold)
    if not g:
        raise ValueError("fact metrics need at least one gold supporting index; this episode has none.")
    r = set(retrieved)
    hit = len(r & g)
    precision = hit / len(r) if r else 0.0
    recall = hit / len(g)
    f1 = 2 * precision * recall / (precision + recall) if hit else 0.0
    return {"fact_precision": precision, "fact_recall": recall, "fact_f1": f1, "fact_em": float(g <= r)}


def recall_at_k(ranked: Sequence[int], gold: Collection[int], k: int) -> float:
    """Fraction of the gold indices among the first `k` ranked indices.

    Raises:
        ValueError: `gold` is empty or `k` < 1.
    """
    g = set(gold)
    if not g:
        raise ValueError("recall@k needs at least one gold supporting index; this episode has none.")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    return len(set(ranked[:k]) & g) / len(g)


# --------------------------------------------------------------------------- text helpers
def _has_word(text: str, phrase: str) -> bool:
    """Whether `phrase` occurs in `text` as whole words, case-insensitively."""
    if not phrase.strip():
        return False
    pattern = r"(?<!\w)" + r"\s+".join(re.escape(w) for w in phrase.split()) + r"(?!\w)"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def first_sentence(text: str) -> str:
    """The first sentence of `text` (up to the first '.', '!', '?' or newline after some content)."""
    stripped = text.strip()
    match = re.search(r"[.!?\n]", stripped)
    return stripped[: match.start()] if match else stripped


# --------------------------------------------------------------------------- BabiLong
def babilong_correct(output: str, target: str, question: str, task: str) -> bool:
    """BabiLong label matching: correct iff the target is the only task label left in the first sentence.

    Labels that occur in the question are ignored (a reader echoing "Where is the milk?" must not be
    penalised for "milk"). For a task without a label set (or a target outside it) the target must occur
    as whole words in the first sentence.

    Args:
        output: The reader's raw output.
        target: The gold answer label.
        question: The question the reader answered.
        task: The bAbI task name (qa1 … qa5).
    """
    sentence = first_sentence(output)
    labels = BABILONG_LABELS.get(task, ())
    if target.lower() not in labels:
        return _has_word(sentence, target)
    candidates = [lab for lab in labels if not _has_word(question, lab)]
    found = {lab for lab in candidates if _has_word(sentence, lab)}
    return found == {target.lower()}


# --------------------------------------------------------------------------- RULER
def ruler_fraction(output: str, values: Sequence[str]) -> float:
    """RULER NIAH: fraction of the gold values present in the output (whole words, case-insensitive)."""
    if not values:
        raise ValueError("RULER scoring needs at least one gold value.")
    return sum(_has_word(output, v) for v in values) / len(values)


def ruler_any_match(output: str, answers: Sequence[str]) -> float:
    """RULER QA: 1.0 if any gold answer string is present in the output (whole words, case-insensitive)."""
    return float(any(_has_word(output, a) for a in answers))


# --------------------------------------------------------------------------- open QA (SQuAD)
def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def final_answer(output: str) -> str:
    """The text after the last "Final answer:" (case-insensitive), else the output's last non-empty line."""
    low = output.lower()
    at = low.rfind(FINAL_ANSWER)
    if at >= 0:
        return output[at + len(FINAL_ANSWER) :].strip().split("\n")[0].strip()
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def exact_match(prediction: str, answers: str | Iterable[str]) -> float:
    """SQuAD EM of the prediction against the best gold answer."""
    golds = [answers] if isinstance(answers, str) else list(answers)
    return float(any(normalize_answer(prediction) == normalize_answer(a) for a in golds))


def token_f1(prediction: str, answers: str | Iterable[str]) -> float:
    """SQuAD token F1 of the prediction against the best gold answer."""
    golds = [answers] if isinstance(answers, str) else list(answers)
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if not pred or not ref:
            best = max(best, float(pred == ref))
            continue
        if common:
            p, r = common / len(pred), common / len(ref)
            best = max(best, 2 * p * r / (p + r))
    return best


def qa_scores(output: str, answers: str | Iterable[str]) -> dict[str, float]:
    """{"answer_em", "answer_f1"} on the text after "Final answer:" in the reader's output."""
    pred = final_answer(output)
    return {"answer_em": exact_match(pred, answers), "answer_f1": token_f1(pred, answers)}
