"""What a trained bAbI model's second hop on qa2 reads from position and what from a sentence's words.

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/hop2_curves.py --model qrag/babilong-minilm-cpu --num 300 \
        --out experiments/results/hop2_curves.json

On qa2 validation episodes of the `babilong-cpu` preset (160 sentences), with the object's fact taken (the
state after a correct first hop), the second hop should take the person's latest move (after a get: the
latest anywhere; after a drop: the latest before the drop, in gap 0). For every episode:

- whether the second hop takes the gold move, and where the gold move and a wrong pick sit (gap 0 before the
  taken fact, gap 1 after it);
- on a miss by another move of the same person: whether its words alone win (both sentences scored at the gold
  move's position) and whether its position alone wins (the gold sentence scored at both positions);
- the position curve: the gold sentence's Q at positions 0, 0.5, ... 38, averaged per kind of taken fact, and
  how often Q rises over 2 units inside gap 0 and inside gap 1 (an order rule needs it to rise wherever the
  latest move may sit).
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
from pathlib import Path

import torch

from qrag.training.data.babi import parse_fact
from qrag.training.data.build import build_episodes
from qrag.training.learn.config import load_preset
from qrag.training.model.positions import GAP_SPAN, GAP_STRIDE, relative_positions
from qrag.training.search.searcher import load_model

STEP = 0.5  # grid step of the position curve
RISE = 2.0  # "rises" = Q higher this many units later


def analyse(model: str, num: int) -> dict[str, object]:
    config = load_preset("babilong-cpu")
    config.data.task, config.data.num_train, config.data.num_val = "qa2", 1, num
    _, episodes = build_episodes(config.data, validation_only=True)
    qnet = load_model(model)
    qnet.eval()
    grid = torch.arange(0.0, GAP_STRIDE + GAP_SPAN + STEP / 2, STEP)  # (P,) gap 0 and gap 1
    outcomes: collections.Counter[str] = collections.Counter()
    words_win = position_wins = same_person = 0
    curves: dict[str, list[torch.Tensor]] = collections.defaultdict(list)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for ep in episodes:
            facts = {i: parse_fact(c) for i, c in enumerate(ep.chunks)}
            moves = [i for i in ep.supporting if (fact := facts[i]) is not None and fact.kind == "move"]
            objects = [i for i in ep.supporting if i not in moves]
            if len(moves) != 1 or len(objects) != 1:
                continue
            gold, taken = moves[0], objects[0]
            gold_fact, taken_fact = facts[gold], facts[taken]
            assert gold_fact is not None, "moves holds parsed facts only"
            assert taken_fact is not None, f"supporting fact {ep.chunks[taken]!r} is not a bAbI fact"
            kind: str = taken_fact.kind
            vectors = qnet.embed_chunks(ep.chunks, 256).float()  # (N, D)
            state = qnet.state_vectors(qnet.tokenize_states([ep.question], [[ep.chunks[taken]]])).float()  # (1, D)
            selected = torch.zeros(1, ep.num_chunks, dtype=torch.bool)
            selected[0, taken] = True
            pos = relative_positions(selected)[0]  # (N,)
            q = qnet.score(state, vectors, pos[None])[0]  # (N,)
            q[taken] = -torch.inf
            pick = int(q.argmax())
            where = "gold in gap " + ("0" if gold < taken else "1")
            if pick == gold:
                outcomes[f"{kind}, {where}: hit"] += 1
            else:
                outcomes[f"{kind}, {where}: miss in gap " + ("0" if pick < taken else "1")] += 1
                wrong = facts[pick]
                if wrong is not None and wrong.kind == "move" and wrong.actor == gold_fact.actor:
                    same_person += 1
                    at = pos[[gold, gold]][None]  # (1, 2) both sentences at the gold move's place
                    words = qnet.score(state, vectors[[pick, gold]], at)[0]
                    places = qnet.score(state, vectors[[gold, gold]], pos[[pick, gold]][None])[0]
                    words_win += int(words[0] > words[1])
                    position_wins += int(places[0] > places[1])
            curves[kind].append(qnet.score(state, vectors[gold].expand(len(grid), -1), grid[None])[0])
    k = round(RISE / STEP)
    in_gap = {g: [i for i in range(len(grid) - k) if GAP_STRIDE * g <= grid[i] and grid[i + k] <= GAP_STRIDE * g + GAP_SPAN]
              for g in (0, 1)}
    shapes = {}
    for kind, rows in sorted(curves.items()):
        c = torch.stack(rows)  # (E, P)
        rises = {f"rises_in_gap_{g}": round(float((c[:, [i + k for i in idx]] > c[:, idx]).float().mean()), 3)
                 for g, idx in in_gap.items()}
        shapes[kind] = {"episodes": len(rows), **rises,
                        "mean_q_every_2_units": [round(x, 3) for x in c.mean(0)[::k].tolist()]}
    return {"episodes": sum(outcomes.values()), "second_hop": dict(sorted(outcomes.items())),
            "misses_by_the_same_person": same_person, "their_words_win": words_win,
            "their_position_wins": position_wins, "curves": shapes,
            "curve_positions": [round(x, 1) for x in grid[::k].tolist()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qrag/babilong-minilm-cpu")
    parser.add_argument("--num", type=int, default=300, help="qa2 validation episodes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="experiments/results/hop2_curves.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {"command": "python experiments/hop2_curves.py " + " ".join(sys.argv[1:]),
              "machine": f"{platform.processor() or platform.machine()}, {args.threads} torch thread(s)",
              **analyse(args.model, args.num)}
    print(json.dumps(result, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
