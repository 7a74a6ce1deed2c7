"""Can the main job's network represent the hard hops? Train it with a plain supervised signal and see.

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/supervised_bound.py --loss ce --updates 200 \
        --out experiments/results/supervised_bound_ce.json

The network is the `babilong-cpu` preset's (frozen MiniLM chunk tower, relative positions, scale 5, the state
tower trained in full) on its qa2+qa3 episodes (160 sentences). Each update draws `--batch` states on the gold
chain (an episode, then a random subset of its supporting facts as already taken, rendered in document
order) and asks the Q-values of every available chunk to rank the supporting facts not yet taken first:
`ce` = cross-entropy of `softmax(Q / T)` onto them, `margin` = `qrag.training.learn.td.margin_loss` alone (no TD).
Every `--eval-every` updates: validation fact EM at exactly |SF| greedy hops per task (the main job's
measure), and the same on as many training episodes (`fit/...`). If this reaches high fact EM in a few hundred
updates while soft Q(λ) does not, the network is not what limits learning; the learning signal is
(docs/LEARNER.md).

Probes of what bounds the network itself (docs/LEARNER.md, "What bounds qa2 and qa3 at |SF| hops now"):
`--chunk-head bias` adds a trainable vector to every frozen chunk vector before the rotation (a position channel
that does not depend on the chunk's text), `--chunk-head linear` a trainable D×D map (identity at the start),
each with its own `--head-lr`; `--rope-base` changes the rotation's frequencies, `--position-scale` stretches the
positions (finer angles between neighbouring chunks); `--num-train` the number of distinct training episodes;
`--chunk-layers N` trains the chunk tower's top N layers too (METHOD.md trains both towers; the main job freezes
the chunk tower), re-embedding each story's facts with it (the background sentences keep the base vectors);
`--recency-head 1,4,16` adds a position term of its own beside the rotation (`RecencyHead`); `--position-warp K`
scores each state under K random order-keeping re-spacings of its gaps too (`warp_positions`), `--gap-stride`
moves the gaps apart without widening them (experiments/NOTEBOOK.md, "Two more probes of the hard hops").
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path
from typing import Any

import torch

from qrag.training.data.babi import parse_fact
from qrag.training.data.build import build_episodes
from qrag.training.learn import td
from qrag.training.learn.checkpoint_selection import evaluate_at_sf
from qrag.training.learn.config import load_preset
from qrag.training.learn.evaluation import evaluate
from qrag.training.model import positions
from qrag.training.model.positions import relative_positions
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorCache


def warp_positions(relative: torch.Tensor, generator: torch.Generator, segments: int = 8) -> torch.Tensor:
    """Relative positions re-spaced by a random monotone map of each gap onto itself (order kept).

    Every gap [20k, 20k + 18] of every row is mapped onto itself by its own piecewise-linear increasing map with
    `segments` pieces of equal width whose rises are flat-Dirichlet shares of the gap's span: the chunks keep
    their order and their gap, only the spacing changes, as if the background between them had been drawn
    again. A rule that depends on order ("the latest move before the fact just taken") holds for every warp; one
    fitted to the spacings of the training stories does not (experiments/NOTEBOOK.md, "Two more probes").

    Args:
        relative: (B, N) relative positions (`relative_positions`).
        generator: the random source.
        segments: pieces of each map (>= 1).

    Returns:
        (B, N) float32 warped positions; a chunk at a gap's start or end stays there.
    """
    if segments < 1:
        raise ValueError(f"warp_positions needs segments >= 1, got {segments}.")
    pos = relative.float()  # (B, N)
    gap = torch.floor(pos / positions.GAP_STRIDE).clamp(min=0)  # (B, N) gap index k
    frac = ((pos - positions.GAP_STRIDE * gap) / positions.GAP_SPAN).clamp(0.0, 1.0)  # (B, N) place in the gap
    num_gaps = int(gap.max().item()) + 1 if gap.numel() else 1
    shape = (pos.shape[0], num_gaps, segments)
    gamma = torch.empty(shape, device=pos.device).exponential_(1.0, generator=generator)  # (B, G, M) Gamma(1)
    rises = gamma / gamma.sum(dim=-1, keepdim=True)  # (B, G, M) Dirichlet shares
    knots = torch.cat((torch.zeros_like(rises[..., :1]), rises.cumsum(dim=-1)), dim=-1)  # (B, G, M + 1)
    scaled = frac * segments  # (B, N)
    piece = scaled.floor().clamp(max=segments - 1)  # (B, N) which segment
    t = scaled - piece  # (B, N) place within it
    rows = knots.gather(1, gap.long().unsqueeze(-1).expand(-1, -1, segments + 1))  # (B, N, M + 1) the row's gap map
    lo = rows.gather(2, piece.long().unsqueeze(-1)).squeeze(-1)  # (B, N)
    hi = rows.gather(2, piece.long().unsqueeze(-1) + 1).squeeze(-1)  # (B, N)
    return positions.GAP_STRIDE * gap + positions.GAP_SPAN * (lo + t * (hi - lo))


class HeadStore:
    """A chunk-vector cache whose vectors pass through `head` (validation sees what the update trains)."""

    def __init__(self, store: ChunkVectorCache, head: torch.nn.Module) -> None:
        self.store, self.head, self.key = store, head, store.key

    def vectors(self, model: QNetwork, texts: Any, **kwargs: Any) -> torch.Tensor:
        with torch.no_grad():
            return self.head(self.store.vectors(model, texts, **kwargs))


def fact_vectors(qnet: QNetwork, store: ChunkVectorCache, chunks: Any) -> torch.Tensor:
    """(N, D) chunk vectors: the cached ones, with the story's facts re-embedded by the (trained) chunk tower."""
    vectors = store.vectors(qnet, chunks).clone()  # (N, D)
    facts = [i for i, c in enumerate(chunks) if parse_fact(c) is not None]
    if facts:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fresh = qnet.chunk_tower(**qnet.tokenize_chunks([chunks[i] for i in facts]))  # (F, D)
        vectors[facts] = fresh.float()
    return vectors


class RecencyHead(torch.nn.Module):
    """`--recency-head`: Q += w(s)·φ(c), a state-dependent weight on position-only features of each chunk.

    φ: for the chunk's gap k (clipped to `gaps − 1`) and its place f ∈ [0, 1] in the gap (read back from the
    relative position 20k + 18f), the powers f^e and (1 − f)^e for e in `powers`, in gap k's slots; zero
    elsewhere. f^16 is near 1 only for the last few chunks before the next retrieved one: "the latest X before
    it" becomes a monotone term the rotation's sinusoids need many frequencies for. Zero-initialised: the
    untrained network is unchanged.
    """

    def __init__(self, dim: int, powers: tuple[float, ...], gaps: int = 5) -> None:
        super().__init__()
        self.powers, self.gaps = torch.tensor(powers), gaps
        self.weight = torch.nn.Linear(dim, gaps * 2 * len(powers))
        torch.nn.init.zeros_(self.weight.weight)
        torch.nn.init.zeros_(self.weight.bias)

    def forward(self, states: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        gap = torch.div(pos, positions.GAP_STRIDE, rounding_mode="floor")  # (B, N)
        frac = ((pos - positions.GAP_STRIDE * gap) / positions.GAP_SPAN).clamp(0, 1)  # (B, N)
        gap = gap.long().clamp(max=self.gaps - 1)  # (B, N)
        feats = torch.cat((frac.unsqueeze(-1) ** self.powers, (1 - frac).unsqueeze(-1) ** self.powers), -1)  # (B, N, 2E)
        slots = torch.nn.functional.one_hot(gap, self.gaps).float()  # (B, N, G)
        phi = (slots.unsqueeze(-1) * feats.unsqueeze(-2)).flatten(-2)  # (B, N, G·2E)
        w = self.weight(states.float())  # (B, G·2E)
        return torch.einsum("bf,bnf->bn", w, phi)  # (B, N)


def add_recency(qnet: QNetwork, head: RecencyHead) -> None:
    """Route every Q-value of `qnet` (update, validation) through the recency term."""
    score = qnet.score

    def with_recency(states: torch.Tensor, chunks: torch.Tensor, positions: torch.Tensor | None = None,
                     heads: bool = False) -> torch.Tensor:
        q = score(states, chunks, positions, heads)
        if positions is None:
            return q
        extra = head(states, positions.expand(states.shape[0], -1))  # (B, N)
        return q + extra / 2 if heads else q + extra

    qnet.score = with_recency  # type: ignore[method-assign]


class FactStore:
    """Validation's chunk vectors with the facts re-embedded by the chunk tower being trained (`--chunk-layers`)."""

    def __init__(self, store: ChunkVectorCache, qnet: QNetwork) -> None:
        self.store, self.qnet, self.key = store, qnet, store.key

    def vectors(self, model: QNetwork, texts: Any, **kwargs: Any) -> torch.Tensor:
        with torch.no_grad():
            return fact_vectors(self.qnet, self.store, texts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="qa2,qa3")
    parser.add_argument("--loss", choices=("ce", "margin"), default="ce")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--temperature", type=float, default=0.1, help="T of the cross-entropy")
    parser.add_argument("--margin", type=float, default=0.1)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chunk-head", choices=("none", "linear", "bias"), default="none",
                        help="linear: a trainable D×D map (identity at start) on the frozen chunk vectors")
    parser.add_argument("--head-lr", type=float, default=None, help="learning rate of the chunk head (default --lr)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rope-base", type=float, default=None, help="RoPE base of the rotation (default: METHOD.md's 10000)")
    parser.add_argument("--position-scale", type=float, default=None,
                        help="multiply the relative positions' gap stride and span (default: METHOD.md's 20 and 18)")
    parser.add_argument("--chunk-layers", type=int, default=0,
                        help="also train the chunk tower's top N transformer layers; the story's facts are then "
                             "re-embedded with it at every update (the background sentences keep their cached vectors)")
    parser.add_argument("--num-train", type=int, default=2000, help="training episodes (split evenly over the tasks)")
    parser.add_argument("--num-val", type=int, default=100, help="validation episodes (split evenly over the tasks)")
    parser.add_argument("--recency-head", default=None,
                        help="powers e of the recency features f^e, (1-f)^e, e.g. '1,4,16' (RecencyHead)")
    parser.add_argument("--gap-stride", type=float, default=None,
                        help="distance between the starts of consecutive gaps (default 20; a gap's chunks keep their 18 "
                             "units: only the empty stretch between gaps widens)")
    parser.add_argument("--position-warp", type=int, default=0,
                        help="score each state under this many warped position sets too (warp_positions) "
                             "and average the loss over them and the real positions")
    parser.add_argument("--warp-segments", type=int, default=8)
    parser.add_argument("--out", default="experiments/results/supervised_bound.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_preset("babilong-cpu")
    config.data.task, config.data.num_train, config.data.num_val = args.tasks, args.num_train, args.num_val
    if args.rope_base is not None:
        positions.ROPE_BASE = args.rope_base
    if args.position_scale is not None:
        positions.GAP_STRIDE *= args.position_scale
        positions.GAP_SPAN *= args.position_scale
    if args.gap_stride is not None:
        positions.GAP_STRIDE = args.gap_stride
    train, val = build_episodes(config.data)
    qnet = QNetwork.from_config(config.model)
    store: Any = ChunkVectorCache(qnet.chunk_vectors_key())
    base_store = store
    with torch.autocast("cpu", dtype=torch.bfloat16):
        store.vectors(qnet, sorted({c for e in train + val for c in e.chunks}), batch_size=256)
    head = torch.nn.Linear(qnet.dim, qnet.dim, bias=args.chunk_head == "bias")
    with torch.no_grad():
        head.weight.copy_(torch.eye(qnet.dim))
        if head.bias is not None:
            head.bias.zero_()
    head.weight.requires_grad_(args.chunk_head == "linear")
    if args.chunk_layers:
        blocks = qnet.chunk_tower.encoder.encoder  # a BERT-style model's encoder: its transformer blocks
        assert isinstance(blocks, torch.nn.Module), f"no .encoder module in {type(qnet.chunk_tower.encoder)}"
        layers = blocks.layer
        assert isinstance(layers, torch.nn.ModuleList), f"no .layer blocks in {type(blocks)}"
        for layer in layers[len(layers) - args.chunk_layers:]:
            layer.requires_grad_(True)
        store = FactStore(store, qnet)
    params = [p for p in qnet.parameters() if p.requires_grad]
    groups = [{"params": params}]
    if args.recency_head:
        recency = RecencyHead(qnet.dim, tuple(float(e) for e in args.recency_head.split(",")))
        add_recency(qnet, recency)
        groups.append({"params": list(recency.parameters()), "lr": args.head_lr or args.lr})
        params = params + groups[-1]["params"]
    if args.chunk_head != "none":
        groups.append({"params": [p for p in head.parameters() if p.requires_grad], "lr": args.head_lr or args.lr})
        params = params + groups[-1]["params"]
        store = HeadStore(store, head)
    torch.manual_seed(args.seed)
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
    rng = random.Random(args.seed)
    warp_gen = torch.Generator().manual_seed(args.seed)

    # A random draw, as many as validation: a stride over `train` (stories of 5 questions in a row) picked the first,
    # shortest question of each story (qa2: 6.5 facts against 12.7 in the validation episodes).
    fit_episodes = random.Random(args.seed + 1).sample(train, min(len(val), len(train)))

    def validate() -> dict[str, float]:
        """Fact EM at |SF| hops on the validation episodes, and (`fit/...`) on as many training episodes."""
        with torch.autocast("cpu", dtype=torch.bfloat16):
            held = evaluate_at_sf(evaluate, qnet, val, config.env, num_envs=64, batch_size=128, store=store)
            fit = evaluate_at_sf(evaluate, qnet, fit_episodes, config.env, num_envs=64, batch_size=128, store=store)
        return {**held, **{f"fit/{k}": v for k, v in fit.items()}}

    curve = [{"updates": 0, "seconds": 0.0, **validate()}]
    print(json.dumps(curve[-1]), flush=True)
    start = time.perf_counter()
    for update in range(1, args.updates + 1):
        qnet.train()
        eps = [rng.choice(train) for _ in range(args.batch)]
        taken = [rng.sample(list(ep.supporting), rng.randrange(len(ep.supporting))) for ep in eps]
        n = max(ep.num_chunks for ep in eps)
        selected = torch.zeros(len(eps), n, dtype=torch.bool)  # (B, N)
        valid = torch.zeros_like(selected)  # (B, N)
        gold = torch.zeros_like(selected)  # (B, N)
        vectors = torch.zeros(len(eps), n, qnet.dim)  # (B, N, D)
        for b, (ep, sel) in enumerate(zip(eps, taken, strict=True)):
            valid[b, : ep.num_chunks] = True
            selected[b, sel] = True
            gold[b, [i for i in ep.supporting if i not in sel]] = True
            vectors[b, : ep.num_chunks] = (fact_vectors(qnet, base_store, ep.chunks) if args.chunk_layers
                                           else base_store.vectors(qnet, ep.chunks))
        if args.chunk_head != "none":
            vectors = head(vectors)  # (B, N, D)
        available = valid & ~selected  # (B, N)
        inputs = qnet.tokenize_states([ep.question for ep in eps],
                                      [[ep.chunks[i] for i in sorted(sel)] for ep, sel in zip(eps, taken, strict=True)])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            states = qnet.state_vectors(inputs)  # (B, D)
        real = relative_positions(selected, valid)  # (B, N)
        position_sets = [real] + [warp_positions(real, warp_gen, args.warp_segments)
                                  for _ in range(args.position_warp)]
        losses = []
        for pos in position_sets:
            q = qnet.score(states, vectors, pos)  # (B, N)
            if args.loss == "ce":
                logits = q.masked_fill(~available, float("-inf")) / args.temperature  # (B, N)
                losses.append((logits.logsumexp(-1) - logits.masked_fill(~gold, float("-inf")).logsumexp(-1)).mean())
            else:
                losses.append(td.margin_loss(q, available, gold, args.margin))
        loss = torch.stack(losses).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 2.0)
        opt.step()
        if update % args.eval_every == 0:
            curve.append({"updates": update, "seconds": time.perf_counter() - start, **validate()})
            print(json.dumps(curve[-1]), flush=True)
    result = {"command": "python experiments/supervised_bound.py " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None),
              "machine": f"{platform.processor() or platform.machine()}, {args.threads} torch thread(s)",
              "states_per_update": args.batch, "curve": curve}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
