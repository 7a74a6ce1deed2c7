"""Does another way of adding BM25 to the first hop beat the shipped one on lexical text? (issue "Ordinary documents")

The paragraph model's first hop ranks by Q + ω · BM25 / max BM25 (METHOD.md §4.5, ω 0.3 saved with the model). On
news and reviews BM25's own first result is hard to beat. This probe compares, on the first hop of each validation
question over its whole file (every passage's first window: long passages are not windowed here), hit@1 and
recall@5 with paired 95% intervals against BM25 alone:

- Q alone, and Q + ω · evidence for ω in `WEIGHTS` (the shipped rule and heavier lexical weights);
- z-score fusion, z(Q) + λ · z(BM25), each standardised over the question's `TOP` best passages of that signal
  (a common score normalisation for fusing rankers, scale-free in both);
- the question's word pairs beside its words (METHOD.md §4.5): Q + 0.3 · (evidence + ρ · pair evidence), the pair
  evidence BM25 over adjacent word pairs (`LexicalIndex.pair_scores`) scaled the same way, for ρ in `PAIR_WEIGHTS`.

Validation files only (new_wiki, amazon_reviews); the evaluation-only ones are refused.

    python experiments/hop1_fusion.py --squad runs/data/new_wiki_v1.0.json --squad runs/data/amazon_reviews_v1.0.json \
        --chunk-vectors runs/cv --out experiments/results/hop1_fusion.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lexical_fit import first_hop_scores  # experiments/lexical_fit.py
from squad_probe import parse_validation_args, squad_probe_parser  # experiments/squad_probe.py

from qrag.eval.metrics import paired_margin
from qrag.eval.ordinary_text import machine
from qrag.eval.ordinary_text_data import load_squad
from qrag.training.search.chunk_vectors import ChunkVectorFolder
from qrag.training.search.lexical import LexicalIndex, lexical_evidence
from qrag.training.search.searcher import load_model

WEIGHTS = (0.3, 0.5, 0.7)
LAMBDAS = (0.3, 0.5, 0.7, 1.0)
PAIR_WEIGHTS = (0.33, 0.5, 0.67)
TOP = 100


def ranks(score: torch.Tensor, gold: Sequence[int]) -> torch.Tensor:
    """(B,) the gold passage's rank under `score` (B, N), 1 = first, ties in its favour."""
    g = torch.tensor(list(gold))
    return (score > score.gather(1, g.unsqueeze(1))).sum(1) + 1


def standardised(x: torch.Tensor, top: int = TOP) -> torch.Tensor:
    """(B, N) `x` less the mean of each row's `top` largest, over their standard deviation."""
    best, _ = x.topk(min(top, x.shape[1]), dim=1)
    return (x - best.mean(1, keepdim=True)) / best.std(1, keepdim=True).clamp_min(1e-6)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_validation_args(squad_probe_parser(__doc__), argv)
    model = load_model(args.model)
    folder = ChunkVectorFolder(args.chunk_vectors) if args.chunk_vectors else None
    result: dict[str, Any] = {"command": " ".join(["python", "experiments/hop1_fusion.py", *(argv or sys.argv[1:])]),
                              "machine": machine(), "model": args.model, "top": TOP, "files": {}}
    for f in args.squad:
        pool = load_squad(f, args.num_questions, args.seed)
        texts = list(pool.passages)
        vectors = (folder.get(model.chunk_vectors_key()).vectors(model, texts) if folder
                   else model.embed_chunks(texts))  # (N, D)
        lexical = LexicalIndex.from_texts(texts, pairs=True)
        bm25 = lexical.scores(list(pool.questions))  # (B, N)
        pairs = lexical_evidence(lexical.pair_scores(list(pool.questions)), torch.ones_like(bm25, dtype=torch.bool))
        with torch.no_grad():
            q, evidence = first_hop_scores(model, pool.questions, vectors, bm25)
        rules = {"bm25": bm25, "Q": q, **{f"Q + {w} evidence": q + w * evidence for w in WEIGHTS},
                 **{f"z(Q) + {lam} z(BM25)": standardised(q) + lam * standardised(bm25) for lam in LAMBDAS},
                 **{f"Q + 0.3 (evidence + {r} pairs)": q + 0.3 * (evidence + r * pairs) for r in PAIR_WEIGHTS}}
        lexical_ranks = ranks(bm25, pool.gold)
        entry: dict[str, Any] = {"passages": len(texts), "questions": len(pool.gold), "rules": {}}
        print(Path(f).name, file=sys.stderr)
        for name, score in rules.items():
            r = ranks(score, pool.gold)
            row: dict[str, Any] = {}
            for metric, k in (("hit@1", 1), ("recall@5", 5)):
                got, ref = (r <= k).float().tolist(), (lexical_ranks <= k).float().tolist()
                row[metric] = statistics.fmean(got)
                row[f"{metric} vs bm25"] = list(paired_margin(got, ref))
            entry["rules"][name] = row
            print(f"  {name:<32} hit@1 {row['hit@1']:.3f} ({row['hit@1 vs bm25'][0]:+.3f} ± "
                  f"{row['hit@1 vs bm25'][1]:.3f})  recall@5 {row['recall@5']:.3f} ({row['recall@5 vs bm25'][0]:+.3f} ± "
                  f"{row['recall@5 vs bm25'][1]:.3f})", file=sys.stderr)
        result["files"][Path(f).name] = entry
    if folder:
        folder.save()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
