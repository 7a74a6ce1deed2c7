"""What `qrag-adapt` ships: the blend weight and horizon that find most held-out passages, never fewer than the start.

The fine-tune is blended with its start at each weight and searched with each horizon (docs/METHOD.md §3.10).

Each candidate (weight w of the fine-tune, horizon h) is scored on
- the held-out questions of the corpus: recall@`CHOICE_K` of the whole corpus searched as a user would (the
  model's own search: its lexical weight and fill, k = `CHOICE_K`); the team's labelled questions when it gave
  some, else the questions built from the corpus;
- the start's own validation data (the HotpotQA pool's validation rows for `qrag/hotpotqa-minilm`, in the
  distractor setting): fact recall of `START_HOPS` greedy hops, where the start must not lose more than
  `HARM_TOLERANCE`.

The rule: **never worse than the start** - a blend that finds fewer of the held-out questions' passages than the
start at its best horizon is refused, whatever else it reads, and so is one that costs the start more than
`HARM_TOLERANCE` on its own data (the start itself is never refused). Among the rest, those whose held-out recall is
within one standard error of the highest; of them, the largest weight, and at that weight the highest held-out
recall (a tie goes to the shorter horizon). When every blend is refused or below, the start ships, and the reason
says so with the figures. Every candidate is scored on the same
questions, so the standard error is the paired one: of the per-question differences from the highest
(`paired_standard_error`); what the questions share (an easy question is easy for every blend) does not count as
noise. What a blend keeps of the start is what the
guard measures; on the corpus's held-out questions a blend within noise of the fine-tune is no evidence for it, and
on human questions over the same corpus the fine-tune found more (docs/RESULTS.md, "Your own corpus").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CHOICE_K = 5
"""Results per question the held-out recall counts (what a retriever typically hands a reader)."""
WEIGHTS = (0.25, 0.5, 0.75, 1.0)
"""The fine-tune's shares tried beside the start (0)."""
HARM_TOLERANCE = 0.02
"""Most the start's own validation score may fall: what a user may lose on the start's own kind of question (greedy
hops without the search's lexical evidence and fill, which move more than a user's search does)."""
FEW_UPDATES = 50
"""A run that made fewer training updates than this says so, on the screen and in its report: the fine-tune is then
close to the start."""
START_HOPS = 2
"""Greedy hops the start's validation takes (its questions have two supporting passages)."""


@dataclass(frozen=True)
class Candidate:
    """One candidate and its scores (`start_score` None where the start has no validation data; `held_out_se` the
    standard error of `held_out` over the held-out questions; `per_question` each held-out question's recall, in
    one order for every candidate; `stop_threshold` the threshold it was searched with, None in older records)."""

    weight: float
    horizon: int
    held_out: float
    start_score: float | None
    held_out_se: float = 0.0
    per_question: tuple[float, ...] = ()
    stop_threshold: float | None = None

    @property
    def name(self) -> str:
        return "the start" if self.weight == 0 else f"w = {self.weight:g}"


def choose(candidates: Sequence[Candidate]) -> tuple[Candidate, str]:
    """The candidate the rule picks (module docstring) and why, in a sentence.

    Raises:
        ValueError: no candidate has weight 0 (the start, the rule's reference).
    """
    starts = [c for c in candidates if c.weight == 0]
    if not starts:
        raise ValueError("the candidates must include the start (weight 0): it is what the rule compares with.")
    reference = starts[0].start_score
    floor = None if reference is None else reference - HARM_TOLERANCE
    start_best = max(s.held_out for s in starts)
    harmful = [c for c in candidates
               if c.weight and floor is not None and c.start_score is not None and c.start_score < floor - 1e-9]
    worse = [c for c in candidates if c.weight and c not in harmful and c.held_out < start_best - 1e-9]
    allowed = [c for c in candidates if c not in harmful and c not in worse]
    top = max(allowed, key=lambda c: (round(c.held_out, 6), c.weight, -c.horizon))
    near = [c for c in allowed if c.held_out >= top.held_out - paired_standard_error(c, top) - 1e-9]
    best = max(near, key=lambda c: (c.weight, round(c.held_out, 6), -c.horizon))
    if best.weight == 0:
        tuned = max((c for c in candidates if c.weight), key=lambda c: c.held_out, default=None)
        why = (f"the start ships unchanged: no blend found more held-out passages than it did (recall@{CHOICE_K} "
               f"{start_best:.3f} with {best.horizon} hops" + (f"; the best blend, {tuned.name} with {tuned.horizon} "
                                                                f"hops, {tuned.held_out:.3f}" if tuned else "") + ")")
    elif best != top:
        why = (f"{best.name} with {best.horizon} hops (held-out recall@{CHOICE_K} {best.held_out:.3f}, the start "
               f"{start_best:.3f}) is the largest share of the fine-tune within one paired standard "
               f"error ({paired_standard_error(best, top):.3f}) of the most held-out passages found ({top.name}, "
               f"{top.horizon} hops: {top.held_out:.3f})")
    else:
        why = (f"{best.name} with {best.horizon} hops finds the most held-out passages (recall@{CHOICE_K} "
               f"{best.held_out:.3f}, the start {start_best:.3f})")
    if worse:
        why += (f"; {len(worse)} candidate(s) found fewer than the start ({', '.join(sorted({c.name for c in worse}))}) "
                "and were refused")
    if floor is None:
        why += "; the start has no validation data of its own here, so nothing guarded what it knew"
    elif harmful:
        why += (f"; {len({c.weight for c in harmful})} weight(s) were refused for costing the start more than "
                f"{HARM_TOLERANCE} on its own validation data ({reference:.3f})")
    else:
        why += f"; no candidate cost the start more than {HARM_TOLERANCE} on its own validation data ({reference:.3f})"
    return best, why + "."


def standard_error(values: Sequence[float]) -> float:
    """The standard error of the mean of `values` (sample standard deviation over √n; 0 for fewer than two)."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def paired_standard_error(a: Candidate, b: Candidate) -> float:
    """The standard error of `a`'s held-out recall minus `b`'s: of their per-question differences when both carry
    them (the same questions), else `b`'s own standard error (the unpaired reading)."""
    if a.per_question and len(a.per_question) == len(b.per_question):
        return standard_error([x - y for x, y in zip(a.per_question, b.per_question, strict=True)])
    return b.held_out_se
