"""`qrag-eval ordinary-text`: ordinary documents and ordinary questions (docs/BENCHMARKS.md §4e).

Shape legend: B questions, N passages (or one paragraph's sentences), D vector dim, K results.

Two parts, each searched as a user would (`MultiHopSearcher` over a `ChunkIndex` built by `from_texts`, the model's
saved search settings, an explicit `k`), beside the baselines on the same passages:

- **SQuAD format** (`run_squad`): every paragraph of a file is a passage of one pool; each question has one gold
  paragraph. Methods: `cosine` (the base MiniLM, what a vector store does), `bm25` (bm25s's scores via
  `LexicalIndex`), `hybrid` (the two fused by reciprocal rank, c = 60: LangChain's `EnsembleRetriever`) and
  `qrag` (the model, searched once per k). Per question and k: hit@1, recall@k (one gold: whether it is among the
  first k) and MRR@k (1 / its rank when within k, else 0).
- **MultiRC** (`run_multirc`): each question searches its own paragraph's sentences in reading order for exactly
  |SF| sentences (`ordered=True`). Methods: `cosine`, `bm25` and each model. Fact EM (every needed sentence among
  the |SF| returned) and fact recall.

Every method is paired with the reference methods (`hybrid` and `bm25`; MultiRC: `cosine` and `bm25`) on the same
questions with a 95% normal-approximation interval (`metrics.paired_margin`). `summary.json`, `records.jsonl`
(per question: what each method returned) and `table.md` are written to the output folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from qrag.eval.metrics import paired_margin
from qrag.eval.ordinary_text_data import MultiRCQuestion, SquadPool, load_multirc, load_squad, paragraphs
from qrag.training.model.precision import speed_flags
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorFolder
from qrag.training.search.index import ChunkIndex, LongChunks, weighs_pairs
from qrag.training.search.lexical import LexicalIndex, reciprocal_rank_fusion
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, load_model
from qrag.training.search.windows import Windows

__all__ = ["KS", "SQUAD_REFERENCES", "MULTIRC_REFERENCES", "run_cli", "run_multirc", "run_squad", "squad_scores"]

KS = (1, 2, 5, 10)
"""The k of the SQuAD-format tables."""
SQUAD_REFERENCES = ("hybrid", "bm25")
MULTIRC_REFERENCES = ("cosine", "bm25")
SUMMARY_FILE, RECORDS_FILE, TABLE_FILE = "summary.json", "records.jsonl", "table.md"


# ---------------------------------------------------------------------- metrics
def squad_scores(ranked: Sequence[int], gold: int, k: int) -> dict[str, float]:
    """recall@k (the gold passage among the first k) and MRR@k (1 / its rank there, else 0) of one question."""
    top = list(ranked[:k])
    rank = top.index(gold) + 1 if gold in top else 0
    return {f"recall@{k}": float(rank > 0), f"mrr@{k}": 1.0 / rank if rank else 0.0}


def fact_scores(retrieved: Sequence[int], supporting: Sequence[int]) -> dict[str, float]:
    """Fact EM (every supporting row retrieved) and fact recall of one question."""
    found = len(set(retrieved) & set(supporting))
    return {"fact_em": float(found == len(set(supporting))), "recall": found / len(set(supporting))}


def _margins(per_question: Mapping[str, list[dict[str, float]]], references: Sequence[str]
             ) -> dict[str, dict[str, dict[str, list[float]]]]:
    """method -> reference -> metric -> [mean difference, 95% half-width], over the same questions."""
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for m, rows in per_question.items():
        for ref in references:
            if ref == m or ref not in per_question:
                continue
            base = per_question[ref]
            out.setdefault(m, {})[ref] = {
                metric: list(paired_margin([r[metric] for r in rows], [r[metric] for r in base]))
                for metric in rows[0]}
    return out


def _means(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {metric: sum(r[metric] for r in rows) / len(rows) for metric in rows[0]}


# ---------------------------------------------------------------------- searches
def _vectors(model: QNetwork, texts: Sequence[str], folder: ChunkVectorFolder | None) -> torch.Tensor:
    """(N, D) chunk-tower vectors of `texts`, kept in `folder` between runs when one is given."""
    if folder is None:
        return model.embed_chunks(list(texts))
    return folder.get(model.chunk_vectors_key()).vectors(model, list(texts))


def _cosine(base: QNetwork, questions: Sequence[str], vectors: torch.Tensor) -> torch.Tensor:
    """(B, N) cosine of each bare question with each passage, both by the base encoder."""
    q = F.normalize(base.embed_questions(list(questions)), dim=-1)  # (B, D)
    return q @ F.normalize(vectors, dim=-1).T  # (B, N)


def _top(scores: torch.Tensor, k: int) -> list[int]:
    """The k best rows of (N,) scores, best first, ties by row."""
    return torch.sort(scores, descending=True, stable=True).indices[:k].tolist()


def _hits(result: Any) -> list[dict[str, Any]]:
    return [{"row": int(h.chunk.id), "hop": h.hop, "q": round(h.q_value, 5), "score": round(float(h.score), 5),
             "past_stop": h.past_stop} for h in result.hits]


def run_squad(pool: SquadPool, model: QNetwork, base: QNetwork, *, ks: Sequence[int] = KS,
              search: Mapping[str, Any] | None = None, folder: ChunkVectorFolder | None = None,
              batch_size: int = 32, long_chunks: LongChunks = "windows") -> dict[str, Any]:
    """Every method over one SQuAD-format pool.

    Args:
        pool: The passages and questions (`load_squad`).
        model: The qrag model, searched with its saved settings (and `search`'s overrides) once per k.
        base: The untrained base encoder (`QNetwork.from_encoder`) of cosine and the hybrid.
        search: `SearchConfig` overrides of the qrag searches (e.g. {'lexical_weight': 0}); None: the model's own.
        long_chunks: Passages longer than the model reads: 'windows' (scored by their best window, as
            `ChunkIndex.from_texts` and the retrievers index them) or 'cut' (their first window only).

    Returns:
        {'means': method -> metric -> mean, 'margins': method -> reference -> metric -> [diff, half-width],
        'records': per question, what each method returned}.
    """
    top_k = max(ks)
    started = time.perf_counter()
    vectors = _vectors(model, pool.passages, folder)  # (N, D)
    base_vectors = vectors if base.chunk_vectors_key() == model.chunk_vectors_key() else _vectors(base, pool.passages, folder)
    windows = Windows.of(model, pool.passages) if long_chunks == "windows" else None
    index = ChunkIndex(vectors, pool.passages, encoder=model.config.encoder,
                       lexical=LexicalIndex.from_texts(pool.passages, pairs=weighs_pairs(model)),
                       windows=windows, long_chunks=long_chunks)
    index_s = time.perf_counter() - started
    cos = _cosine(base, pool.questions, base_vectors)  # (B, N)
    bm25 = index.lexical.scores(list(pool.questions)) if index.lexical is not None else None  # (B, N)
    assert bm25 is not None
    ranked: dict[str, list[list[int]]] = {
        "cosine": [_top(row, top_k) for row in cos],
        "bm25": [_top(row, top_k) for row in bm25],
        "hybrid": [_top(reciprocal_rank_fusion([b, c]), top_k) for b, c in zip(bm25, cos, strict=True)],
    }
    searcher = MultiHopSearcher(model, index, SearchConfig(batch_size=batch_size))
    by_k: dict[int, list[Any]] = {}
    search_s = 0.0
    for k in ks:
        start = time.perf_counter()
        by_k[k] = searcher.search(list(pool.questions), k=k, **dict(search or {}))
        search_s += time.perf_counter() - start
    per_question: dict[str, list[dict[str, float]]] = {m: [] for m in (*ranked, "qrag")}
    records = []
    for b, gold in enumerate(pool.gold):
        rec: dict[str, Any] = {"id": pool.ids[b], "question": pool.questions[b], "gold": gold}
        for m, rows in ranked.items():
            scores = {"hit@1": float(rows[b][:1] == [gold])}
            for k in ks:
                scores.update(squad_scores(rows[b], gold, k))
            per_question[m].append(scores)
            rec[m] = rows[b]
        first = [int(h.chunk.id) for h in by_k[1 if 1 in ks else min(ks)][b].hits]
        scores = {"hit@1": float(first[:1] == [gold])}
        for k in ks:
            scores.update(squad_scores([int(h.chunk.id) for h in by_k[k][b].hits], gold, k))
        per_question["qrag"].append(scores)
        rec["qrag"] = {str(k): _hits(by_k[k][b]) for k in ks}
        records.append(rec)
    return {"means": {m: _means(rows) for m, rows in per_question.items()},
            "margins": _margins(per_question, SQUAD_REFERENCES), "records": records,
            "passages": len(pool.passages), "questions": len(pool.questions), "file_questions": pool.total_questions,
            "long_passages": sum(len(model.tokenizer(p)["input_ids"]) > model.config.max_chunk_tokens
                                 for p in pool.passages),
            "seconds": {"index": index_s, "qrag_search": search_s}}


def run_multirc(questions: Sequence[MultiRCQuestion], models: Mapping[str, QNetwork], base: QNetwork, *,
                search: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every method over MultiRC questions, each searching its own paragraph's sentences (in reading order) for
    exactly |SF| of them.

    Args:
        questions: The questions (`load_multirc`).
        models: Name -> qrag model, each searched with its saved settings, `ordered=True`.
        base: The untrained base encoder of cosine.
        search: `SearchConfig` overrides of the qrag searches.
    """
    by_paragraph: dict[tuple[str, ...], list[int]] = {}
    for i, q in enumerate(questions):
        by_paragraph.setdefault(q.sentences, []).append(i)
    got: dict[str, list[list[int]]] = {m: [[] for _ in questions] for m in ("cosine", "bm25", *models)}
    for sentences, rows in by_paragraph.items():
        asked = [questions[i].question for i in rows]
        sizes = [len(questions[i].supporting) for i in rows]
        cos = _cosine(base, asked, base.embed_chunks(list(sentences)))  # (B, N)
        lexical = LexicalIndex.from_texts(sentences)
        bm25 = lexical.scores(asked)  # (B, N)
        for j, (i, k) in enumerate(zip(rows, sizes, strict=True)):
            got["cosine"][i] = _top(cos[j], k)
            got["bm25"][i] = _top(bm25[j], k)
        for name, model in models.items():
            index = ChunkIndex(model.embed_chunks(list(sentences)), sentences, encoder=model.config.encoder,
                               ordered=True, lexical=lexical)
            searcher = MultiHopSearcher(model, index, ordered=True)
            for k in dict.fromkeys(sizes):
                group = [j for j, s in enumerate(sizes) if s == k]
                found = searcher.search([asked[j] for j in group], k=k, **dict(search or {}))
                for j, result in zip(group, found, strict=True):
                    got[name][rows[j]] = [int(h.chunk.id) for h in result.hits]
    per_question = {m: [fact_scores(r, q.supporting) for r, q in zip(rows, questions, strict=True)]
                    for m, rows in got.items()}
    records = [{"id": q.id, "supporting": list(q.supporting), **{m: got[m][i] for m in got}}
               for i, q in enumerate(questions)]
    return {"means": {m: _means(rows) for m, rows in per_question.items()},
            "margins": _margins(per_question, MULTIRC_REFERENCES), "records": records,
            "questions": len(questions), "paragraphs": paragraphs(questions),
            "mean_sentences": sum(len(q.sentences) for q in questions) / len(questions),
            "mean_supporting": sum(len(q.supporting) for q in questions) / len(questions)}


# ---------------------------------------------------------------------- report
def _cell(means: Mapping[str, float], margins: Mapping[str, Any], metric: str, ref: str) -> str:
    text = f"{means[metric]:.3f}"
    if ref in margins:
        d, h = margins[ref][metric]
        text += f" ({d:+.3f} ± {h:.3f})"
    return text


def table(part: Mapping[str, Any], metrics: Sequence[str], reference: str) -> str:
    """A Markdown table of one part: each method's mean per metric, with its paired 95% margin to `reference`."""
    lines = [f"| method | {' | '.join(metrics)} |", "|---" * (len(metrics) + 1) + "|"]
    for m, means in part["means"].items():
        margins = part["margins"].get(m, {})
        lines.append(f"| {m} | " + " | ".join(_cell(means, margins, x, reference) for x in metrics) + " |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """Where the benchmark ran: the CPU's model and vector flags, torch, its threads."""
    cpu = platform.processor()
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), cpu)
    except OSError:
        pass
    flags = " ".join(speed_flags())
    return {"cpu": cpu, "flags": flags, "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version()}


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                             cwd=Path(__file__).resolve().parent)
    except OSError:
        return None
    return out.stdout.strip() or None


def run_cli(args: argparse.Namespace) -> int:
    """`qrag-eval ordinary-text`: run the parts asked for and write summary.json, records.jsonl and table.md."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    search = dict(args.search)
    folder = ChunkVectorFolder(args.chunk_vectors) if args.chunk_vectors is not None else None
    model = load_model(args.model)
    base = QNetwork.from_encoder(args.encoder, train_towers="state", max_chunk_tokens=model.config.max_chunk_tokens,
                                 normalize=True)
    summary: dict[str, Any] = {"command": " ".join(["qrag-eval", *sys.argv[1:]]) if sys.argv[1:2] == ["ordinary-text"]
                               else None, "commit": _commit(), "date": time.strftime("%Y-%m-%d"),
                               "machine": machine(), "model": args.model, "search": search,
                               "long_chunks": getattr(args, "long_chunks", "windows"), "parts": {}}
    tables = []
    records = []
    with torch.no_grad():
        for path in args.squad:
            pool = load_squad(path, args.num_questions, args.seed)
            part = run_squad(pool, model, base, ks=args.ks, search=search, folder=folder,
                             long_chunks=args.long_chunks)
            name = Path(path).stem
            records += [{"part": name, **r} for r in part.pop("records")]
            summary["parts"][name] = part
            metrics = ["hit@1", *[x for k in args.ks for x in (f"recall@{k}", f"mrr@{k}")]]
            for ref in SQUAD_REFERENCES:
                tables.append(f"## {name}: {part['questions']} questions over {part['passages']} passages "
                              f"({part['long_passages']} over {model.config.max_chunk_tokens} tokens); "
                              f"margins vs {ref}\n\n" + table(part, metrics, ref))
        if args.multirc is not None:
            questions = load_multirc(args.multirc, args.half, args.multirc_questions, args.seed)
            models = {name: load_model(name) for name in (args.model, *args.sentence_models)}
            part = run_multirc(questions, models, base, search=search)
            records += [{"part": "multirc", **r} for r in part.pop("records")]
            summary["parts"]["multirc"] = part
            for ref in MULTIRC_REFERENCES:
                tables.append(f"## MultiRC ({args.half} half): {part['questions']} questions over "
                              f"{part['paragraphs']} paragraphs ({part['mean_sentences']:.1f} sentences, "
                              f"|SF| {part['mean_supporting']:.2f}); margins vs {ref}\n\n"
                              + table(part, ["fact_em", "recall"], ref))
    if folder is not None:
        folder.save()
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    (out / RECORDS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    text = "\n\n".join(tables) + "\n"
    (out / TABLE_FILE).write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {out / SUMMARY_FILE}, {RECORDS_FILE}, {TABLE_FILE}")
    return 0
