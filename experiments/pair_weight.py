"""Which weight ρ of the question's word pairs in the lexical evidence should the paragraph model ship with? (issue
"Ordinary documents": never below BM25 or the hybrid at any k)

The paragraph model ranks each hop by Q + ω · (BM25 of the state's words + ρ · BM25 of the question's word pairs),
each scaled by the best available passage (METHOD.md §4.5); the model ships ρ = 0 until now. For each ρ of
`--weights` the model (its saved ω, guard and fill) is searched as a user calls it:

- on SQuAD-format validation files (new_wiki, amazon_reviews; every paragraph one pool, 500 questions each), the
  whole search once per k as `qrag-eval ordinary-text` runs it (`run_squad`), beside BM25 and the hybrid;
- on HotpotQA's 360 validation questions (rows 8 500-8 999), each searching the whole validation pool (12 476
  passages), as `qrag-eval hotpotqa_pool --tasks val --methods qrag --budget 10` runs it: fact EM@2 and recall.

The rule, the one the model's ω was chosen by (its card): the ρ with the largest worst paired margin to BM25 and to
the hybrid at hit@1 and recall@2/5/10 on the two SQuAD-format files, among those whose HotpotQA validation fact
EM@2 is within 0.02 of ρ = 0's. Every ρ is also paired with ρ = 0 per question. Validation files only: the
evaluation-only ones (NYT, Reddit, SQuAD dev, HotpotQA's test rows) are refused or never read.

    python experiments/pair_weight.py --squad runs/data/new_wiki_v1.0.json --squad runs/data/amazon_reviews_v1.0.json \
        --chunk-vectors runs/cv --work runs/pair_weight --out experiments/results/pair_weight.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from squad_probe import parse_validation_args, squad_probe_parser  # experiments/squad_probe.py

from qrag.eval.baselines import make_retrievers
from qrag.eval.metrics import paired_margin
from qrag.eval.ordinary_text import machine, run_squad
from qrag.eval.ordinary_text_data import load_squad
from qrag.eval.runner import read_results, run
from qrag.eval.sweep import RunConfig
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorFolder
from qrag.training.search.searcher import load_model

WEIGHTS = (0.0, 0.33, 0.5, 0.67, 1.0)
KS = (1, 2, 5, 10)
METRICS = ("hit@1", "recall@2", "recall@5", "recall@10")
EM_TOLERANCE = 0.02
HOTPOT = ("fact_em_at_sf", "recall_at_2", "recall_at_5", "recall_at_10")


def squad_part(model: QNetwork, base: QNetwork, files: Sequence[str], args: Any,
               folder: ChunkVectorFolder | None) -> dict[str, Any]:
    """Per file: per question, qrag's, BM25's and the hybrid's hit@1 and recall@k."""
    out = {}
    for f in files:
        pool = load_squad(f, args.num_questions, args.seed)
        part = run_squad(pool, model, base, ks=KS, folder=folder)
        rows: dict[str, dict[str, list[float]]] = {m: {x: [] for x in METRICS} for m in ("qrag", "bm25", "hybrid")}
        for rec in part["records"]:
            for m in rows:
                ranked = [h["row"] for h in rec["qrag"]["1"]] if m == "qrag" else rec[m]
                rows[m]["hit@1"].append(float(ranked[:1] == [rec["gold"]]))
                for k in KS[1:]:
                    got = [h["row"] for h in rec["qrag"][str(k)]] if m == "qrag" else rec[m][:k]
                    rows[m][f"recall@{k}"].append(float(rec["gold"] in got))
        out[Path(f).stem] = rows
    return out


def hotpot_part(model: QNetwork, work: Path, tag: str, folder: ChunkVectorFolder | None,
                label: str = "qrag/hotpotqa-minilm") -> dict[str, list[float]]:
    """Per HotpotQA validation question, qrag's fact EM@2 and recall@2/5/10 (the sweep's records, in
    `work/hotpot_{tag}`; `label` names the model there)."""
    cfg = RunConfig(benchmark="hotpotqa_pool", out=work / f"hotpot_{tag}", methods=("qrag",), tasks=("val",),
                    num_samples=1000, model=label, budget=10,
                    chunk_vectors=None if folder is None else folder.folder, progress=False)
    run(cfg, retrievers=make_retrievers(("qrag",), checkpoint=model, budget=10, chunk_vectors=folder))
    if folder is not None:
        folder.save()
    records = sorted(read_results(cfg.out / "results.jsonl"), key=lambda r: r["id"])
    return {m: [float(r[m]) for r in records] for m in HOTPOT}


def main(argv: Sequence[str] | None = None) -> int:
    p = squad_probe_parser(__doc__)
    p.add_argument("--weights", type=lambda t: tuple(float(x) for x in t.split(",")), default=WEIGHTS)
    p.add_argument("--work", type=Path, required=True, help="folder for the HotpotQA sweeps' records")
    args = parse_validation_args(p, argv)
    if 0.0 not in args.weights:
        p.error("--weights must include 0 (the search every ρ is paired with)")
    base = QNetwork.from_encoder("all-MiniLM-L6-v2", train_towers="state", max_chunk_tokens=256, normalize=True)
    folder = ChunkVectorFolder(args.chunk_vectors) if args.chunk_vectors else None
    per: dict[float, dict[str, Any]] = {}
    for w in sorted(args.weights):
        model = load_model(args.model)
        model.hop_settings.pair_weight = w
        started = time.perf_counter()
        with torch.no_grad():
            squad = squad_part(model, base, args.squad, args, folder)
        hotpot = hotpot_part(model, args.work, f"{w:g}", folder)
        per[w] = {"squad": squad, "hotpot": hotpot, "seconds": time.perf_counter() - started}
        print(f"ρ {w:g}: " + "  ".join(f"{name} " + " ".join(f"{statistics.fmean(v['qrag'][m]):.3f}" for m in METRICS)
                                        for name, v in squad.items())
              + f"  hotpot EM@2 {statistics.fmean(hotpot['fact_em_at_sf']):.3f}", file=sys.stderr)
    zero = per[0.0]
    table: dict[str, Any] = {}
    for w, got in per.items():
        entry: dict[str, Any] = {"squad": {}, "hotpot": {}}
        worst = float("inf")
        for name, rows in got["squad"].items():
            entry["squad"][name] = {}
            for m in METRICS:
                cell: dict[str, Any] = {"mean": statistics.fmean(rows["qrag"][m]),
                                        "vs rho 0": list(paired_margin(rows["qrag"][m],
                                                                       zero["squad"][name]["qrag"][m]))}
                for ref in ("bm25", "hybrid"):
                    cell[f"vs {ref}"] = list(paired_margin(rows["qrag"][m], rows[ref][m]))
                    worst = min(worst, cell[f"vs {ref}"][0])
                entry["squad"][name][m] = cell
        for m in HOTPOT:
            entry["hotpot"][m] = {"mean": statistics.fmean(got["hotpot"][m]),
                                  "vs rho 0": list(paired_margin(got["hotpot"][m], zero["hotpot"][m]))}
        entry["worst margin"] = worst
        entry["hotpot ok"] = entry["hotpot"]["fact_em_at_sf"]["vs rho 0"][0] >= -EM_TOLERANCE
        entry["seconds"] = got["seconds"]
        table[f"{w:g}"] = entry
    allowed = [w for w in table if table[w]["hotpot ok"]]
    chosen = max(allowed, key=lambda w: (table[w]["worst margin"], -float(w)))
    result = {"command": " ".join(["python", "experiments/pair_weight.py", *(argv or sys.argv[1:])]),
              "machine": machine(), "model": args.model, "rule": "largest worst margin to BM25 and the hybrid "
              f"(hit@1, recall@2/5/10, both files), HotpotQA val fact EM@2 within {EM_TOLERANCE} of rho 0",
              "chosen": chosen, "weights": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"chosen ρ = {chosen}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
