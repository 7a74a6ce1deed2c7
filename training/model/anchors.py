"""State anchors (`model.state_anchor`, docs/LEARNER.md): state vectors measured from the frozen base encoder.

f_θ is the trained state tower, f_0 the frozen base (the network's chunk tower, in eval mode, no gradient),
q a state's question piece (its tokens up to the first [SEP], attended to alone) and p its passages without
the question (`[CLS] c_1 [SEP] …`). Every mode but 'none' starts from f_0(q), the base encoder's own question
vector, and adds what training changed:

- `'question'`: `f_0(q) + f_θ(s) − f_0(s)`;
- `'first_hop'`: `f_0(q) + [f_θ(s) − f_0(s)] − [f_θ(q) − f_0(q)]`: what training changed on the whole state less
  what it changed on the question alone, so a state that is the bare question (the first hop) is exactly
  `f_0(q)`, trained or not;
- `'passages'`: `f_0(q) + f_θ(p) − f_0(p)`: the first hop is `f_0(q)`, and the correction cannot read the question.

Shape legend: B state rows, B' the rows that took passages, L tokens, D vector dim.
"""

from __future__ import annotations

import torch

from qrag.training.model.config import StateAnchor
from qrag.training.model.towers import Tower, eval_mode, passage_inputs, question_inputs

Inputs = dict[str, torch.Tensor]


def anchored_states(mode: StateAnchor, state_tower: Tower, base: Tower, state_inputs: Inputs, sep_id: int) -> torch.Tensor:
    """(B, D) state vectors of tokenised states `[CLS] q [SEP] c_1 [SEP] …` (B, L) under anchor `mode`."""
    if mode == "none":
        return state_tower(**state_inputs)  # (B, D)
    question = question_inputs(state_inputs, sep_id)  # (B, Lq)
    f0_q = _frozen(base, question)  # (B, D)
    if mode == "passages":
        return _passages(state_tower, base, f0_q, passage_inputs(state_inputs, sep_id))
    s = state_tower(**state_inputs)  # (B, D)
    if mode == "first_hop":
        return _first_hop(state_tower, base, f0_q, s, state_inputs, question)
    return s + question_anchor(base, state_inputs, f0_q).to(s.dtype)  # (B, D): 'question'


def question_anchor(base: Tower, state_inputs: Inputs, f0_q: torch.Tensor) -> torch.Tensor:
    """(B, D) the frozen term of anchor 'question', `f_0(q) − f_0(s)`, from the question vectors `f0_q`: what a state
    vector adds to `f_θ(s)`; it does not train, so `qrag.training.model.trunk` keeps it once per state."""
    return f0_q - _frozen(base, state_inputs)


def frozen_question(base: Tower, state_inputs: Inputs, sep_id: int) -> torch.Tensor:
    """(B, D) `f_0(q)`: the frozen base's vector of each state's question piece."""
    return _frozen(base, question_inputs(state_inputs, sep_id))


def _frozen(base: Tower, inputs: Inputs) -> torch.Tensor:
    """f_0 of `inputs`: the base tower in eval mode, without gradient."""
    with eval_mode(base), torch.no_grad():
        return base(**inputs)


def _first_hop(state_tower: Tower, base: Tower, f0_q: torch.Tensor, s: torch.Tensor, state_inputs: Inputs,
               question: Inputs) -> torch.Tensor:
    # A bare question's correction is zero exactly (not two dropout draws of it); later hops subtract the state
    # tower's own question vector, computed for those rows only.
    later = question["attention_mask"].sum(dim=1) < state_inputs["attention_mask"].sum(dim=1)  # (B,)
    out = f0_q.to(s.dtype) + 0.0 * s  # (B, D) in the graph with a zero gradient (a batch of bare questions)
    if not bool(later.any()):
        return out
    f0_s = _frozen(base, {k: v[later] for k, v in state_inputs.items()})  # (B', D)
    q_theta = state_tower(**{k: v[later] for k, v in question.items()})  # (B', D)
    correction = s[later] - f0_s.to(s.dtype) - (q_theta - f0_q[later].to(s.dtype))  # (B', D)
    return out.index_put((later.nonzero().squeeze(1),), out[later] + correction)


def _passages(state_tower: Tower, base: Tower, f0_q: torch.Tensor, passages: Inputs) -> torch.Tensor:
    """f_0(q) + f_θ(p) − f_0(p) on rows that took passages, f_0(q) exactly on bare questions (their `[CLS]`-only
    rows are encoded only when nothing else is, to keep the graph)."""
    later = passages["attention_mask"].sum(dim=1) > 1  # (B,)
    if not bool(later.any()):
        return f0_q + 0.0 * state_tower(**passages)  # (B, D) in the graph with a zero gradient
    rows = {k: v[later] for k, v in passages.items()}
    p_theta = state_tower(**rows)  # (B', D)
    out = f0_q.to(p_theta.dtype)  # (B, D)
    correction = p_theta - _frozen(base, rows).to(p_theta.dtype)  # (B', D)
    return out.index_put((later.nonzero().squeeze(1),), out[later] + correction)
