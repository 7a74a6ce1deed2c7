"""Which guard keeps a HotpotQA-trained model's gain in its domain and its harm small outside it?

For each question of a validation set this records, once, everything the candidate guards decide from: the
base encoder's cosine scores of the question (what cosine search ranks by), the model's Q-values at the first
hop, after its first hop and after its second, and the gold chunks. The guards are then simulated on those
rows, so every candidate is scored on the same searches:

- `qrag`: two hops, the rest of the budget from the state after the second hop (what search does now);
- `cosine`: the base encoder's ranking;
- `fill`: two hops, the rest from the cosine ranking;
- `stop@t`: the second hop only where its Q-value is at least t, the rest from the cosine ranking;
- `trust@m`: the second hop chosen among the cosine ranking's first m, the rest from the cosine ranking.

Validation data only (HotpotQA val rows 8 500-8 999 over their pool; the wiki source's val pages); nothing here
reads a test split or FanOutQA.

    python experiments/hop_guard.py qrag/hotpotqa-minilm --out experiments/results/hop_guard.json \
        --save-rows runs/hop_guard.rows.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from qrag.training.data.hotpot_pool import iter_hotpot_pool
from qrag.training.data.wiki import iter_wiki
from qrag.training.model.qnet import QNetwork
from qrag.training.search import hops
from qrag.training.search.searcher import load_model

KEEP = 10  # results per question the simulated guards rank
THRESHOLDS = (0.1, 0.2, 0.25, 0.272, 0.3, 0.325, 0.35, 0.375, 0.4, 0.425, 0.45, 0.475, 0.5)
OFF_DOMAIN_K = {"wiki_single_val": 2, "wiki_mix_val": 2, "wiki_fanout_val": 4, "wiki_category_val": 4,
                "wiki_inlink_val": 4}  # the off-domain sets and the k each is held to
MARGINS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2)
TOLERANCE = 0.01  # how far below the unguarded search's in-domain recall@2 a threshold may go
WIDTH = 64  # candidates kept per ranking


def rows_of(model: QNetwork, base: QNetwork, episodes: list, vectors: list[torch.Tensor]) -> list[dict]:
    """Per episode: top-WIDTH rows and scores of cosine and of Q at each hop, the hops and the gold rows."""
    out = []
    for start in range(0, len(episodes), 32):
        group = episodes[start : start + 32]
        vecs = vectors[start : start + 32]
        questions = [ep.question for ep in group]
        if all(v is vecs[0] for v in vecs):  # one pool every question searches
            corpora = hops.Corpora.shared(vecs[0], group[0].chunks, len(group))
        else:
            corpora = hops.Corpora.padded(vecs, [ep.chunks for ep in group], torch.device("cpu"))
        with torch.no_grad():
            base_q = hops.encode_states(base, questions, [[] for _ in group])  # (B, D): f_0(q)
            taken: list[list[int]] = [[] for _ in group]
            per_hop = []
            for _ in range(3):
                scores, _ = hops.hop_scores(model, questions, corpora, list(range(len(group))), taken,
                                             model.config.state_order, 128)  # (B, N)
                per_hop.append(scores)
                best = scores.argmax(dim=1).tolist()
                taken = [t + [int(i)] for t, i in zip(taken, best, strict=True)]
        for b, ep in enumerate(group):
            n = len(ep.chunks)
            cos = (vecs[b] @ base_q[b]).float()  # (N,)
            row = {"gold": list(ep.supporting), "kind": (ep.metadata or {}).get("kind", "hotpotqa"), "hops": taken[b][:2],
                   "cos": cos.tolist() if n <= 200 else None}
            ct, ci = cos.topk(min(WIDTH, n))
            row["cos_top"] = [ci.tolist(), ct.tolist()]
            for t, scores in enumerate(per_hop):
                qt, qi = scores[b, :n].topk(min(WIDTH, n - t))
                row[f"q{t}_top"] = [qi.tolist(), qt.tolist()]
            # Q after the first hop of the cosine ranking's top WIDTH (for fused / trusted second hops).
            row["q1_on_cos"] = per_hop[1][b, ci].tolist()
            row["cos_on_q1"] = cos[torch.tensor(row["q1_top"][0])].tolist()
            out.append(row)
    return out


def ranked(first: list[int], then: list[int], k: int = KEEP) -> list[int]:
    out = list(dict.fromkeys(first))
    for i in then:
        if len(out) >= k:
            break
        if i not in out:
            out.append(i)
    return out[:k]


def policies(r: dict) -> dict[str, list[int]]:
    cos = r["cos_top"][0]
    h1, h2 = r["hops"]
    q2_first = [i for i in r["q2_top"][0] if i not in (h1, h2)]
    q1_on_cos = dict(zip(cos, r["q1_on_cos"], strict=True))
    second_q = dict(zip(r["q1_top"][0], r["q1_top"][1], strict=True))[h2]
    out = {"qrag": ranked([h1, h2], q2_first), "cosine": cos[:KEEP], "fill": ranked([h1, h2], cos),
           "hop1+cos": ranked([h1], cos)}
    for t in THRESHOLDS:
        out[f"stop@{t}"] = ranked([h1, h2] if second_q >= t else [h1], cos)
    first_cos = next(i for i in cos if i != h1)  # the question's best chunk after the first hop
    for d in MARGINS:
        keep = second_q - q1_on_cos[first_cos] >= d
        out[f"margin@{d}"] = ranked([h1, h2] if keep else [h1], cos)
    for m in (2, 3, 5, 10, 20):
        pool = [i for i in cos[:m] if i != h1]
        pick = max(pool, key=lambda i: q1_on_cos[i]) if pool else h2
        out[f"trust@{m}"] = ranked([h1, pick], cos)
    return out


def recall(hits: list[int], gold: list[int], k: int) -> float:
    return len(set(hits[:k]) & set(gold)) / len(gold)


def summarise(sets: dict[str, list[dict]]) -> dict:
    table: dict = {}
    for name, rows in sets.items():
        sims = [policies(r) for r in rows]
        table[name] = {}
        for pol in sims[0]:
            ks = {f"recall@{k}": float(np.mean([recall(s[pol], r["gold"], k) for s, r in zip(sims, rows, strict=True)]))
                  for k in (1, 2, 4, 5, 8, 10)}
            ks["fact_em@2"] = float(np.mean([recall(s[pol], r["gold"], 2) == 1.0 for s, r in zip(sims, rows, strict=True)]))
            table[name][pol] = ks
    return table


def choose(table: dict) -> dict:
    """The guard's threshold: of those keeping HotpotQA val recall@2 within TOLERANCE of the unguarded search's
    (`fill`, the in-domain gain intact), the one whose worst off-domain margin to cosine (each set at its k) is
    largest (ties: the higher threshold, the more cautious)."""
    inside = table["hotpotqa_val"]
    kept = [t for t in THRESHOLDS if inside[f"stop@{t}"]["recall@2"] >= inside["fill"]["recall@2"] - TOLERANCE - 1e-9]

    def worst(t: float) -> float:
        return min(table[s][f"stop@{t}"][f"recall@{k}"] - table[s]["cosine"][f"recall@{k}"]
                   for s, k in OFF_DOMAIN_K.items())

    margins = {t: round(worst(t), 4) for t in kept}
    best = max(kept, key=lambda t: (margins[t], t)) if kept else None
    assert choose.__doc__ is not None
    return {"rule": choose.__doc__.split(":", 1)[1].strip(), "tolerance": TOLERANCE, "off_domain_k": OFF_DOMAIN_K,
            "worst_off_domain_margin": margins, "chosen": best}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--wiki-samples", type=int, default=200)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", default=None, help="reuse the per-question rows an earlier run saved (--save-rows)")
    parser.add_argument("--save-rows", default=None, help="where to keep the per-question rows (about 9 MB)")
    parser.add_argument("--kinds", default=None, help="with --rows: recompute these wiki kinds only (comma-separated), "
                        "keep the rest of the rows")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.rows and not args.kinds:
        sets = json.loads(Path(args.rows).read_text())
    else:
        model = load_model(args.model, precision="bf16")
        base = QNetwork.from_encoder(model.config.encoder, train_towers="state", max_chunk_tokens=model.config.max_chunk_tokens,
                                     normalize=model.config.normalize).eval()
        start = time.time()
        if args.kinds:
            sets = json.loads(Path(args.rows).read_text())
        else:
            hp = list(iter_hotpot_pool(split="val"))
            pool = model.embed_chunks(hp[0].chunks, precision="bf16")
            print(f"val pool {len(hp[0].chunks)} passages embedded in {time.time() - start:.0f} s", file=sys.stderr)
            sets = {"hotpotqa_val": rows_of(model, base, hp, [pool] * len(hp))}
        for kind in args.kinds.split(",") if args.kinds else ("single", "mix", "fanout", "category", "inlink"):
            eps = list(itertools.islice(iter_wiki(kind, split="val"), args.wiki_samples))
            vecs = [model.embed_chunks(ep.chunks, precision="bf16") for ep in eps]
            sets[f"wiki_{kind}_val"] = rows_of(model, base, eps, vecs)
            print(f"{kind} done at {time.time() - start:.0f} s", file=sys.stderr)
        if args.save_rows:
            Path(args.save_rows).write_text(json.dumps(sets))
    table = summarise(sets)
    chosen = choose(table)
    Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "n": {k: len(v) for k, v in sets.items()},
                                          "choice": chosen, "table": table}, indent=1))
    for name, pols in table.items():
        print(f"\n{name} (n={len(sets[name])})")
        for pol, ks in pols.items():
            print(f"  {pol:10s} " + " ".join(f"{k}={v:.3f}" for k, v in ks.items()))
    print(f"\nworst off-domain margin of the thresholds keeping the in-domain gain: {chosen['worst_off_domain_margin']}; "
          f"chosen {chosen['chosen']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
