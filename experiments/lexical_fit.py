"""Can a corpus choose its own lexical weight ω, with no labels? (issue "Ordinary documents", item 1, third lever)

Shape legend: M pseudo-questions, B questions, N passages, G weights of the grid.

The paragraph model ranks a hop by Q + ω · BM25 evidence (METHOD.md §4.5), ω saved with the model (0.3). Text
where words carry the answer (news, reviews) may want more lexical weight, text people paraphrase less. The probe:

1. **Pseudo-questions from the corpus alone** (the inverse cloze task): M passages with at least three sentences
   (pysbd), one of their middle sentences drawn as the "question", the passage searched *without* that sentence
   (its vector and its BM25 row are the shortened passage's), so the words shared are the context's, not a copy.
2. For every ω of the grid, the first hop's ranking of those pseudo-questions (Q of the bare question's state +
   ω · BM25 evidence): MRR@10 of the passage each came from. The fitted ω is the grid's best.
3. The same curve for the file's real questions (validation files only: new_wiki, amazon_reviews), to see whether
   the fitted ω lands where the labelled best does, and what it gains over the model's fixed ω.

    python experiments/lexical_fit.py --squad new_wiki_v1.0.json --squad amazon_reviews_v1.0.json \
        --chunk-vectors runs/cv --out experiments/results/lexical_fit.json
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from squad_probe import parse_validation_args, squad_probe_parser  # experiments/squad_probe.py

from qrag.eval.metrics import paired_margin
from qrag.eval.ordinary_text import machine
from qrag.eval.ordinary_text_data import load_squad
from qrag.training.data.text_sources import split_sentences
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorFolder
from qrag.training.search.lexical import LexicalIndex, lexical_evidence
from qrag.training.search.searcher import load_model

GRID = tuple(round(0.1 * i, 1) for i in range(0, 16))


def pseudo_questions(passages: Sequence[str], m: int, seed: int) -> list[tuple[int, str, str]]:
    """(row, question sentence, the passage without it) for up to m passages with at least three sentences."""
    rng = random.Random(seed)
    rows = list(range(len(passages)))
    rng.shuffle(rows)
    out = []
    for r in rows:
        sents = split_sentences(passages[r])
        if len(sents) < 3:
            continue
        i = rng.randrange(1, len(sents) - 1)
        out.append((r, sents[i], " ".join(sents[:i] + sents[i + 1:])))
        if len(out) == m:
            break
    return out


def first_hop_scores(model: QNetwork, questions: Sequence[str], vectors: torch.Tensor, bm25: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N) Q of each bare question's state and (B, N) its BM25 evidence in [0, 1]."""
    s = model.embed_states(list(questions), [[] for _ in questions])  # (B, D)
    return s @ vectors.T, lexical_evidence(bm25, torch.ones_like(bm25, dtype=torch.bool))


def per_question(q: torch.Tensor, ev: torch.Tensor, gold: Sequence[int], weight: float) -> list[dict[str, float]]:
    """hit@1, recall@5 and MRR@10 of each question's gold passage under Q + weight · evidence."""
    score = q + weight * ev  # (B, N)
    g = torch.tensor(list(gold))
    rank = (score > score.gather(1, g.unsqueeze(1))).sum(1) + 1  # (B,) 1 = first (ties in the gold's favour)
    return [{"hit@1": float(r == 1), "recall@5": float(r <= 5), "mrr@10": 1.0 / r if r <= 10 else 0.0}
            for r in rank.tolist()]


def curve(q: torch.Tensor, ev: torch.Tensor, gold: Sequence[int]) -> dict[float, list[dict[str, float]]]:
    return {w: per_question(q, ev, gold, w) for w in GRID}


def means(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}


def main(argv: Sequence[str] | None = None) -> int:
    p = squad_probe_parser(__doc__)
    p.add_argument("--pseudo", type=int, default=300, help="pseudo-questions per corpus")
    args = parse_validation_args(p, argv)
    model = load_model(args.model)
    fixed = float(model.hop_settings.lexical_weight)
    folder = ChunkVectorFolder(args.chunk_vectors) if args.chunk_vectors else None
    result: dict[str, Any] = {"command": " ".join(["python", "experiments/lexical_fit.py", *(argv or sys.argv[1:])]),
                              "machine": machine(), "model": args.model, "fixed_weight": fixed, "grid": GRID,
                              "files": {}}
    for f in args.squad:
        pool = load_squad(f, args.num_questions, args.seed)
        texts = list(pool.passages)
        vectors = (folder.get(model.chunk_vectors_key()).vectors(model, texts) if folder
                   else model.embed_chunks(texts))  # (N, D)
        if folder:
            folder.save()
        # 1. pseudo-questions, each against the corpus with its own passage shortened
        pseudo = pseudo_questions(texts, args.pseudo, args.seed)
        rows = [r for r, _, _ in pseudo]
        short = model.embed_chunks([t for _, _, t in pseudo])  # (M, D)
        # every pseudo-question sees the corpus with all M passages shortened (one BM25 index, not M; each
        # passage loses one sentence: a small change to the corpus's statistics)
        corpus = list(texts)
        for r, _, rest in pseudo:
            corpus[r] = rest
        cvec = vectors.clone()
        cvec[torch.tensor(rows)] = short
        bm25 = LexicalIndex.from_texts(corpus).scores([s for _, s, _ in pseudo])  # (M, N)
        q, ev = first_hop_scores(model, [s for _, s, _ in pseudo], cvec, bm25)
        fit_curve = curve(q, ev, rows)
        fitted = max(GRID, key=lambda w: (means(fit_curve[w])["mrr@10"], -abs(w - fixed)))
        # 2. the real questions' curve
        bm25 = LexicalIndex.from_texts(texts).scores(list(pool.questions))  # (B, N)
        q, ev = first_hop_scores(model, pool.questions, vectors, bm25)
        real = curve(q, ev, pool.gold)
        best = max(GRID, key=lambda w: (means(real[w])["mrr@10"], -abs(w - fixed)))
        entry = {
            "passages": len(texts), "pseudo_questions": len(pseudo), "questions": len(pool.gold),
            "fitted_weight": fitted, "labelled_best_weight": best,
            "pseudo_curve": {str(w): means(r) for w, r in fit_curve.items()},
            "real_curve": {str(w): means(r) for w, r in real.items()},
            "fitted_vs_fixed": {k: list(paired_margin([r[k] for r in real[fitted]], [r[k] for r in real[fixed]]))
                                for k in ("hit@1", "recall@5", "mrr@10")},
            "best_vs_fixed": {k: list(paired_margin([r[k] for r in real[best]], [r[k] for r in real[fixed]]))
                              for k in ("hit@1", "recall@5", "mrr@10")},
        }
        result["files"][Path(f).name] = entry
        print(f"{Path(f).name}: fitted ω {fitted}, labelled best {best}; fitted vs fixed {entry['fitted_vs_fixed']}",
              file=sys.stderr)
        for w in GRID:
            print(f"  ω {w}: pseudo {means(fit_curve[w])}  real {means(real[w])}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
