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

`served_states` computes the same vectors in a gradient-free pass at the floor of their cost: a bare question's
terms that cancel are not computed, each piece is encoded over its own rows only, and `f_0(q)` comes from
`question_vectors` (`QNetwork` keeps it per question: it is the same at every hop of a search).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from qrag.training.model.config import StateAnchor
from qrag.training.model.towers import Tower, eval_mode, passage_inputs, question_inputs
from qrag.training.model.trunk import layers_of

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


def served_states(mode: StateAnchor, state_tower: Tower, base: Tower, state_inputs: Inputs, sep_id: int,
                  question_vectors: Callable[[Inputs], torch.Tensor], shared: int = 0,
                  keep: Callable[[Inputs, torch.Tensor], None] | None = None) -> torch.Tensor:
    """(B, D) `anchored_states` of tokenised states (B, L) in a gradient-free pass, each term computed only where it
    does not cancel: a bare question (the first hop, s = q) is `f_θ(q)` under 'question' and `f_0(q)` under
    'first_hop' and 'passages', exactly what the full expressions reduce to; on the rows holding passages each
    pass runs over those rows, cut to their longest. `question_vectors(question)` gives `f_0(q)` of tokenised
    question pieces (B', Lq). Under 'question', `shared` bottom layers the two towers have in common
    (`trunk.shared_layers`) run once for `f_θ(s)` and `f_0(s)`, and a bare question's `f_0(q)`, its base's top
    layers over that trunk, goes to `keep(question, vectors)` for its later hops."""
    if mode == "none":
        return state_tower(**state_inputs)  # (B, D)
    if mode == "question" and shared:
        return _question_on_shared_trunk(state_tower, base, state_inputs, sep_id, question_vectors, shared, keep)
    if mode == "question":
        s = state_tower(**state_inputs)  # (B, D): f_θ(s)
        return s + served_anchor(base, state_inputs, sep_id, question_vectors).to(s.dtype)
    question = question_inputs(state_inputs, sep_id)  # (B, Lq)
    later = question["attention_mask"].sum(dim=1) < state_inputs["attention_mask"].sum(dim=1)  # (B,)
    out = question_vectors(question)  # (B, D): f_0(q), a bare question's whole vector under both modes
    if not bool(later.any()):
        return out
    if mode == "first_hop":
        rows, q_rows = _rows(state_inputs, later), _rows(question, later)
        f0_q = out[later]  # (B', D)
        correction = state_tower(**rows) - _frozen(base, rows) - (state_tower(**q_rows) - f0_q)  # (B', D)
    else:  # 'passages'
        rows = _rows(passage_inputs(state_inputs, sep_id), later)
        correction = state_tower(**rows) - _frozen(base, rows)  # (B', D)
    return out.index_put((later.nonzero().squeeze(1),), out[later] + correction.to(out.dtype))


def _question_on_shared_trunk(state_tower: Tower, base: Tower, state_inputs: Inputs, sep_id: int,
                              question_vectors: Callable[[Inputs], torch.Tensor], shared: int,
                              keep: Callable[[Inputs, torch.Tensor], None] | None = None) -> torch.Tensor:
    """Anchor 'question' where the towers share their `shared` bottom layers: the trunk runs once over every row,
    the state tower's top layers over every row, the base's top layers over the rows holding passages, and, with
    `keep`, over the bare questions' rows too: their `f_0(q)` (a question's whole base vector: its trunk is the
    base's) is handed to `keep`, so a later hop does not encode the question again."""
    top = _layers(state_tower) - shared
    ids, mask = state_inputs["input_ids"], state_inputs["attention_mask"]  # (B, L)
    later = question_inputs(state_inputs, sep_id)["attention_mask"].sum(dim=1) < mask.sum(dim=1)  # (B,)
    hidden = state_tower.trunk(ids, mask, top)  # (B, L, H)
    s = state_tower.from_trunk(hidden, mask, top)  # (B, D): f_θ(s)
    bare = ~later
    if keep is not None and bool(bare.any()):
        rows = _rows(state_inputs, bare)  # (B'', Lq): a bare state is its question piece
        with eval_mode(base):
            keep(rows, base.from_trunk(hidden[bare][:, : rows["input_ids"].shape[1]], rows["attention_mask"], top))
    if not bool(later.any()):
        return s
    rows = _rows(state_inputs, later)  # (B', L')
    with eval_mode(base):
        f0_s = base.from_trunk(hidden[later][:, : rows["input_ids"].shape[1]], rows["attention_mask"], top)  # (B', D)
    anchor = question_vectors(_rows(question_inputs(state_inputs, sep_id), later)) - f0_s  # (B', D)
    return s.index_put((later.nonzero().squeeze(1),), s[later] + anchor.to(s.dtype))


def _layers(tower: Tower) -> int:
    found = layers_of(tower.encoder)
    assert found is not None, "shared_layers found layers"
    return len(found[1])


@torch.no_grad()
def served_anchor(base: Tower, state_inputs: Inputs, sep_id: int,
                  question_vectors: Callable[[Inputs], torch.Tensor]) -> torch.Tensor:
    """(B, D) the frozen term of anchor 'question', `f_0(q) − f_0(s)`, of tokenised states (B, L): zero on a bare
    question (s = q: the terms cancel, nothing is encoded), and on the rows holding passages `f_0(s)` encoded over
    those rows and `f_0(q)` from `question_vectors`."""
    question = question_inputs(state_inputs, sep_id)  # (B, Lq)
    later = question["attention_mask"].sum(dim=1) < state_inputs["attention_mask"].sum(dim=1)  # (B,)
    anchor = torch.zeros(len(later), _dim(base), device=later.device)  # (B, D)
    if bool(later.any()):
        anchor[later] = (question_vectors(_rows(question, later)) - _frozen(base, _rows(state_inputs, later))).float()
    return anchor


def _dim(tower: Tower) -> int:
    """The tower's vector dim (its encoder's hidden size: pooling keeps it)."""
    return int(tower.encoder.config.hidden_size)  # type: ignore[union-attr,arg-type]


def _rows(inputs: Inputs, keep: torch.Tensor) -> Inputs:
    """The rows `keep` (B,) of tokenised inputs, cut to the longest of them (no padding the others needed)."""
    mask = inputs["attention_mask"][keep]  # (B', L)
    width = int(mask.sum(dim=1).max())
    return {k: v[keep][:, :width] for k, v in inputs.items()}


def question_anchor(base: Tower, state_inputs: Inputs, f0_q: torch.Tensor) -> torch.Tensor:
    """(B, D) the frozen term of anchor 'question', `f_0(q) − f_0(s)`, from the question vectors `f0_q`: what a state
    vector adds to `f_θ(s)`; it does not train, so `qrag.training.model.trunk` keeps it once per state."""
    return f0_q - _frozen(base, state_inputs)


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
