"""Long passages: cut them (today), read 512 tokens, or split them into windows? (issue "Ordinary documents", item 3)

Shape legend: B questions, N passages, W windows, D vector dim.

On SQuAD-format validation pools (new_wiki, amazon_reviews: never the evaluation-only files), every passage
embedded four ways by the paragraph model's chunk tower:

- `cut`: the first `max_chunk_tokens` (256) tokens, as shipped;
- `read512`: the first 512 tokens (MiniLM's positions reach 512; the model was trained at 256);
- `windows_mean`: windows of 256 tokens (stride `--stride`), their unit vectors averaged and re-normalised: one
  vector per passage, so every store serves it unchanged;
- `windows_max`: every window a vector, the passage scored by its best window (several vectors per passage).

Two readings: the first hop's ranking (the bare question's state, Q alone and Q + ω · the question's BM25
evidence, ω the model's own) for every mode (`--parts first_hop`); and the whole search as a user calls it, cut
against the library's windows (`ChunkIndex` with `long_chunks`; `MultiHopSearcher` with the model's saved
settings, once per k, as `qrag-eval ordinary-text` runs it; `--parts search`), with its paired margins to BM25 and
the hybrid. Each on all questions and on the questions whose gold passage is longer than 256 tokens; paired 95%
margins to `cut`. (The first-hop probe's windows start every `--stride` 128 tokens; the library's every 127.)

    python experiments/long_passages.py --squad new_wiki_v1.0.json --squad amazon_reviews_v1.0.json \
        --out experiments/results/long_passages.json
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from squad_probe import parse_validation_args, squad_probe_parser  # experiments/squad_probe.py

from qrag.eval.metrics import paired_margin
from qrag.eval.ordinary_text import KS, machine, run_squad, squad_scores
from qrag.eval.ordinary_text_data import load_squad
from qrag.training.model.qnet import QNetwork
from qrag.training.model.towers import encode_longest_first, pad_rows
from qrag.training.search.chunk_vectors import ChunkVectorFolder
from qrag.training.search.lexical import LexicalIndex, lexical_evidence
from qrag.training.search.searcher import load_model

CUT, READ512, MEAN, MAX = "cut", "read512", "windows_mean", "windows_max"


def _windows(model: QNetwork, texts: Sequence[str], window: int, stride: int) -> tuple[list[list[int]], list[int]]:
    """Token rows of every window (special tokens around each) and the passage each belongs to."""
    tok = model.tokenizer
    body = window - 2
    rows, owner = [], []
    for i, ids in enumerate(tok(list(texts), add_special_tokens=False)["input_ids"]):
        starts = list(range(0, max(len(ids) - body, 0) + 1, stride))
        if starts[-1] + body < len(ids):
            starts.append(len(ids) - body)
        for s in starts:
            rows.append([tok.cls_token_id, *ids[s : s + body], tok.sep_token_id])
            owner.append(i)
    return rows, owner


@torch.no_grad()
def _embed_rows(model: QNetwork, rows: list[list[int]]) -> torch.Tensor:
    model.eval()
    return encode_longest_first(lambda inputs: model.chunk_tower(**inputs),
                                lambda idx: pad_rows([rows[i] for i in idx], model.pad_id),
                                [len(r) for r in rows], 16, model.chunk_tower(**pad_rows([rows[0]], model.pad_id)).shape[-1],
                                model.device, desc="windows", show=False)


def _read(model: QNetwork, texts: Sequence[str], tokens: int) -> torch.Tensor:
    rows = [ids[:tokens - 1] + ids[-1:] if len(ids) > tokens else ids
            for ids in model.tokenizer(list(texts))["input_ids"]]
    return _embed_rows(model, rows)


def vectors_by_mode(model: QNetwork, texts: Sequence[str], stride: int) -> tuple[dict[str, torch.Tensor], list[int]]:
    """mode -> (N, D) passage vectors (`windows_max`: (W, D) window vectors) and the owner of each window."""
    out: dict[str, torch.Tensor] = {}
    timing: dict[str, float] = {}
    for mode, tokens in ((CUT, model.config.max_chunk_tokens), (READ512, 512)):
        t = time.perf_counter()
        out[mode] = _read(model, texts, tokens)
        timing[mode] = time.perf_counter() - t
    t = time.perf_counter()
    rows, owner = _windows(model, texts, model.config.max_chunk_tokens, stride)
    win = _embed_rows(model, rows)  # (W, D)
    timing[MAX] = time.perf_counter() - t
    owner_t = torch.tensor(owner)
    mean = torch.zeros(len(texts), win.shape[1]).index_add_(0, owner_t, F.normalize(win, dim=-1))
    out[MEAN] = F.normalize(mean, dim=-1) if model.config.normalize else mean / torch.bincount(owner_t).unsqueeze(1)
    out[MAX] = win
    print(f"  embedded: {timing} s, {len(rows)} windows for {len(texts)} passages", file=sys.stderr)
    return out, owner


def first_hop(model: QNetwork, questions: Sequence[str], vectors: dict[str, torch.Tensor], owner: list[int],
              bm25: torch.Tensor, weight: float) -> dict[str, dict[str, list[list[int]]]]:
    """mode -> {'q': rankings by Q alone, 'q+lex': by Q + ω · BM25 evidence}, the top max(KS) passages each."""
    s = model.embed_states(list(questions), [[] for _ in questions])  # (B, D)
    n = bm25.shape[1]
    evidence = lexical_evidence(bm25, torch.ones_like(bm25, dtype=torch.bool))  # (B, N)
    out = {}
    for mode, v in vectors.items():
        q = s @ v.T  # (B, N) or (B, W)
        if mode == MAX:
            idx = torch.tensor(owner).expand(q.shape[0], -1)
            q = torch.full((q.shape[0], n), -torch.inf).scatter_reduce(1, idx, q, reduce="amax")  # (B, N)
        out[mode] = {name: [torch.sort(row, descending=True, stable=True).indices[: max(KS)].tolist() for row in r]
                     for name, r in (("q", q), ("q+lex", q + weight * evidence))}
    return out


def _scores(ranked: Sequence[int], gold: int) -> dict[str, float]:
    got = {"hit@1": float(list(ranked[:1]) == [gold])}
    for k in KS:
        got.update(squad_scores(ranked, gold, k))
    return got


def _summary(per_mode: dict[str, list[dict[str, float]]], keep: Sequence[bool]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, rows in per_mode.items():
        mine = [r for r, k in zip(rows, keep, strict=True) if k]
        base = [r for r, k in zip(per_mode[CUT], keep, strict=True) if k]
        if not mine:
            continue
        out[mode] = {m: {"mean": sum(r[m] for r in mine) / len(mine),
                         "vs_cut": list(paired_margin([r[m] for r in mine], [r[m] for r in base]))}
                     for m in ("hit@1", "recall@2", "recall@5", "recall@10")}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = squad_probe_parser(__doc__)
    p.add_argument("--stride", type=int, default=128, help="window stride in tokens (windows of max_chunk_tokens)")
    p.add_argument("--parts", default="first_hop,search",
                   help="first_hop (four modes, the first hop's ranking) and/or search (cut against windows, the whole "
                        "search as `qrag-eval ordinary-text` runs it)")
    args = parse_validation_args(p, argv)
    torch.manual_seed(0)
    model = load_model(args.model)
    parts = set(args.parts.split(","))
    base = QNetwork.from_encoder("all-MiniLM-L6-v2", train_towers="state", normalize=True,
                                 max_chunk_tokens=model.config.max_chunk_tokens)
    folder = ChunkVectorFolder(args.chunk_vectors) if args.chunk_vectors else None
    weight = float(model.hop_settings.lexical_weight)
    result: dict[str, Any] = {"command": " ".join(["python", "experiments/long_passages.py", *(argv or sys.argv[1:])]),
                              "machine": machine(), "model": args.model, "lexical_weight": weight, "files": {}}
    for f in args.squad:
        pool = load_squad(f, args.num_questions, args.seed)
        lengths = [len(r) for r in model.tokenizer(list(pool.passages))["input_ids"]]
        long_gold = [lengths[g] > model.config.max_chunk_tokens for g in pool.gold]
        print(f"{Path(f).name}: {len(pool.passages)} passages, {sum(x > 256 for x in lengths)} over 256 tokens, "
              f"{sum(x > 512 for x in lengths)} over 512; {sum(long_gold)} of {len(pool.gold)} questions' gold long",
              file=sys.stderr)
        bm25 = LexicalIndex.from_texts(pool.passages).scores(list(pool.questions))  # (B, N)
        entry: dict[str, Any] = {"passages": len(pool.passages), "questions": len(pool.gold),
                                 "long_passages": sum(x > 256 for x in lengths),
                                 "over_512": sum(x > 512 for x in lengths), "long_gold": sum(long_gold)}
        if "first_hop" in parts:
            vectors, owner = vectors_by_mode(model, pool.passages, args.stride)
            hops = first_hop(model, pool.questions, vectors, owner, bm25, weight)
            for reading in ("q", "q+lex"):
                per_mode = {m: [_scores(r, g) for r, g in zip(hops[m][reading], pool.gold, strict=True)] for m in hops}
                entry[f"first_hop/{reading}"] = {"all": _summary(per_mode, [True] * len(pool.gold)),
                                                 "long_gold": _summary(per_mode, long_gold)}
        if "search" in parts:
            per_mode = {}
            for mode, name in (("cut", CUT), ("windows", MAX)):
                got = run_squad(pool, model, base, folder=folder, long_chunks=mode)  # type: ignore[arg-type]
                per_mode[name] = [{"hit@1": float(bool(r["qrag"]["1"]) and r["qrag"]["1"][0]["row"] == r["gold"]),
                                   **{f"recall@{k}": float(r["gold"] in [h["row"] for h in r["qrag"][str(k)]])
                                      for k in KS}} for r in got["records"]]
                if mode == "cut":
                    entry["baselines"] = {m: got["means"][m] for m in ("cosine", "bm25", "hybrid")}
                    refs = {m: [_scores(r[m], r["gold"]) for r in got["records"]] for m in ("bm25", "hybrid")}
            entry["search"] = {"all": _summary(per_mode, [True] * len(pool.gold)),
                               "long_gold": _summary(per_mode, long_gold)}
            entry["search_vs"] = {ref: {m: list(paired_margin([r[m] for r in per_mode[MAX]], [r[m] for r in rows]))
                                        for m in ("hit@1", "recall@2", "recall@5", "recall@10")}
                                  for ref, rows in refs.items()}
            if folder:
                folder.save()
        result["files"][Path(f).name] = entry
        print(json.dumps({k: v for k, v in entry.items()}, indent=1)[:4000], file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
