"""Which paragraph model and state length should ship: adapters on the top layers only, states cut shorter? (issue
"A multi-hop answer at a plain retriever's price, second round", items 1 and 2)

A model whose trained layers are its top ones shares the frozen layers below with the base encoder, so `f_θ(s)` and
`f_0(s)` cost one trunk pass (`qrag.training.model.trunk`); a state cut to fewer tokens of each passage
(`max_state_piece_tokens`) costs fewer. Each candidate `NAME=MODEL@TOKENS` (a checkpoint folder or shipped name, the
state pieces cut to TOKENS at search time, the question's too; `@pTOKENS`: each passage's piece alone; MODEL alone
keeps its own lengths) is searched as a user calls it, with the
baseline's saved search (lexical weight, word pairs, fill, stop threshold: what a candidate would ship with):

- on SQuAD-format validation files (new_wiki, amazon_reviews; every paragraph one pool, 500 questions each) as
  `qrag-eval ordinary-text` runs it, beside BM25 and the hybrid: hit@1 and recall@2/5/10;
- on HotpotQA's 360 validation questions (rows 8 500-8 999), each over the whole validation pool (12 476 passages),
  as `qrag-eval hotpotqa_pool --tasks val --methods qrag --budget 10` runs it: fact EM@2 and recall.

The rule, committed before any candidate was trained (issue item 1): a candidate **holds** when its HotpotQA
validation fact EM@2 is at least the baseline's − 0.02 and, on each of the two files, each of its paired margins to
BM25 and to the hybrid (hit@1, recall@2/5/10) is at least the baseline's same margin − 0.01. Of the fp32 candidates
that hold, the cheapest ships: the fewest state tokens, then the fewest trained layers (`--layers NAME=N`; the baseline
trains all six). None holding: the baseline stays. A candidate served in another precision (`:bf16`) is judged by the
same rule, to say whether that precision may be the default. Validation files only: the evaluation-only ones are
refused.

**The top 3 layers** (2026-12-02, the next session, written while it trained and before any reading): trained as the
others were (`--trainer.train-layers 3`, one thread, bf16, 31 minutes), read as `top3-p64` (each passage's piece cut
to 64 tokens, as shipped) against the same baseline (`--model qrag/hotpotqa-minilm@p128`) by the same rule. If it holds
it is the cheapest that does (64 tokens, 3 layers) and ships as the default paragraph model once the quality figures of
RESULTS are read again with it; if not, the shipped model stays.

**Int8 serving** (2026-12-03, written before any int8 reading): the shipped model served with its state passes (both
towers' gradient-free passes of every hop, `f_θ` and `f_0`; the index stays fp32) through ONNX Runtime with its
matrix products' weights in int8 (per channel, activations quantised per pass: `qrag.training.model.onnx_engine`), read
as `shipped-p64-int8=qrag/hotpotqa-minilm@p64:int8` against the shipped fp32 search (`--model qrag/hotpotqa-minilm@p64`)
by the same rule. If it holds, 'auto' may serve int8 on a CPU where its timed passes are clearly faster (as it does
bf16); if not, int8 serves only when asked and the default stays fp32.

**7-bit int8 weights** (2026-12-04, written before any reading of them): on an x86 CPU without VNNI (AVX2 only)
ONNX Runtime's int8 kernels add two neighbouring products into 16 bits, which saturates with 8-bit weights; a graph
whose weights are cut to 7 bits cannot saturate there, so the integers such a CPU computes from it are exactly those
this VNNI CPU computes (`onnx_engine.int8_weight_bits`). The shipped model served in int8 with 7-bit weights
(`QRAG_INT8_WEIGHTS=7`), read as `shipped-p64-int8w7=qrag/hotpotqa-minilm@p64:int8` against the shipped fp32 search
by the same rule. If it holds, x86 CPUs without VNNI serve the 7-bit graph (and 'auto' may pick it there by its
timing); if not, 'auto' offers int8 only where the CPU has VNNI or AMX, and elsewhere int8 serves only when asked.

    python experiments/top_layers.py --squad runs/data/new_wiki_v1.0.json --squad runs/data/amazon_reviews_v1.0.json \
        --candidate top1=runs/hp-top1/best@128 --candidate top1-64=runs/hp-top1/best@64 --layers top1=1 \
        --layers top1-64=1 --chunk-vectors runs/cv --work runs/top_layers --out experiments/results/top_layers.json
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from pair_weight import HOTPOT, METRICS, hotpot_part, squad_part  # experiments/pair_weight.py
from squad_probe import parse_validation_args, squad_probe_parser  # experiments/squad_probe.py

from qrag.eval.metrics import paired_margin
from qrag.eval.ordinary_text import machine
from qrag.training.model import onnx_engine
from qrag.training.model.qnet import QNetwork
from qrag.training.search.chunk_vectors import ChunkVectorFolder
from qrag.training.search.searcher import load_model

EM_TOLERANCE = 0.02
MARGIN_TOLERANCE = 0.01
BASELINE = "baseline"
ALL_LAYERS = 6


def candidate(text: str) -> tuple[str, str, str | None, str]:
    """`NAME=MODEL[@TOKENS][:PRECISION]` as (name, model, tokens or None, serving precision, default fp32)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--candidate {text!r}: write NAME=MODEL[@TOKENS][:PRECISION]")
    rest, colon, precision = rest.rpartition(":") if ":" in rest else (rest, "", "fp32")
    model, at, tokens = rest.rpartition("@") if "@" in rest else (rest, "", "")
    return name, model, tokens if at else None, precision


def loaded(model: str, tokens: str | None, search_of: QNetwork | None, precision: str = "fp32") -> QNetwork:
    """The model, its state pieces cut to `tokens` ('N': every piece, the question's too; 'pN': each passage's alone),
    served in `precision`, searched as `search_of` is saved to be (its hop settings)."""
    net = load_model(model, precision=precision)  # type: ignore[arg-type]
    if tokens is not None and tokens.startswith("p"):
        net.config = dataclasses.replace(net.config, max_state_passage_tokens=int(tokens[1:]))
    elif tokens is not None:
        net.config = dataclasses.replace(net.config, max_state_piece_tokens=int(tokens), max_state_passage_tokens=None)
    if search_of is not None:
        net.hop_settings = dataclasses.replace(search_of.hop_settings)
    return net


def state_tokens(net: QNetwork) -> int:
    """The tokens a state keeps of each passage: what the rule counts."""
    c = net.config
    return c.max_state_piece_tokens if c.max_state_passage_tokens is None else c.max_state_passage_tokens


def margins(rows: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, list[float]]]:
    """metric -> reference -> [paired difference, half-width] of qrag against BM25 and the hybrid."""
    return {m: {ref: list(paired_margin(rows["qrag"][m], rows[ref][m])) for ref in ("bm25", "hybrid")}
            for m in METRICS}


def judge(got: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The rule's verdict on one candidate against the baseline, with the figures it read."""
    entry: dict[str, Any] = {"squad": {}, "hotpot": {}}
    short = []
    for name, rows in got["squad"].items():
        mine, theirs = margins(rows), margins(base["squad"][name])
        entry["squad"][name] = {m: {"mean": statistics.fmean(rows["qrag"][m]), "margins": mine[m],
                                    "baseline margins": theirs[m],
                                    "vs baseline": list(paired_margin(rows["qrag"][m], base["squad"][name]["qrag"][m]))}
                                for m in METRICS}
        short += [f"{name} {m} vs {ref} {mine[m][ref][0]:+.3f} (baseline {theirs[m][ref][0]:+.3f})"
                  for m in METRICS for ref in ("bm25", "hybrid")
                  if mine[m][ref][0] < theirs[m][ref][0] - MARGIN_TOLERANCE]
    for m in HOTPOT:
        entry["hotpot"][m] = {"mean": statistics.fmean(got["hotpot"][m]),
                              "vs baseline": list(paired_margin(got["hotpot"][m], base["hotpot"][m]))}
    em, em0 = entry["hotpot"]["fact_em_at_sf"]["mean"], statistics.fmean(base["hotpot"]["fact_em_at_sf"])
    if em < em0 - EM_TOLERANCE:
        short.append(f"HotpotQA validation fact EM@2 {em:.3f} (baseline {em0:.3f})")
    entry["holds"] = not short
    entry["short"] = short
    return entry


def main(argv: Sequence[str] | None = None) -> int:
    p = squad_probe_parser(__doc__)
    p.add_argument("--candidate", action="append", default=[], type=candidate, help="NAME=MODEL[@TOKENS] (repeat)")
    p.add_argument("--layers", action="append", default=[], help="NAME=N: the candidate's trained top layers")
    p.add_argument("--work", type=Path, required=True,
                   help="folder for the HotpotQA sweeps' records and each candidate's reading (reused when it is there)")
    p.add_argument("--only", default=None, type=lambda t: set(t.split(",")),
                   help="read only these candidates (comma-separated names; the baseline too if named) and stop: "
                        "runs in parallel, then one run over every reading")
    args = parse_validation_args(p, argv)
    layers = {k: int(v) for k, _, v in (x.partition("=") for x in args.layers)}
    base_encoder = QNetwork.from_encoder("all-MiniLM-L6-v2", train_towers="state", max_chunk_tokens=256, normalize=True)
    folder = ChunkVectorFolder(args.chunk_vectors) if args.chunk_vectors else None
    first = candidate(f"{BASELINE}={args.model}")  # --model MODEL[@TOKENS]: the baseline as it was shipped
    baseline = loaded(first[1], first[2], None)
    per: dict[str, dict[str, Any]] = {}
    for name, model, tokens, precision in [first, *args.candidate]:
        if args.only is not None and name not in args.only:
            continue
        net = baseline if name == BASELINE else loaded(model, tokens, baseline, precision)
        record = args.work / f"{name}.json"  # a candidate's reading, kept: runs in parallel share them
        said = {"model": model, "tokens": state_tokens(net), "precision": precision,
                "int8_weight_bits": onnx_engine.int8_weight_bits() if precision == "int8" else None,
                "files": [str(f) for f in args.squad], "num_questions": args.num_questions, "seed": args.seed}
        kept = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
        if kept is not None and all(kept.get(k) == v for k, v in said.items()):
            per[name] = kept
        else:
            started = time.perf_counter()
            with torch.no_grad():
                squad = squad_part(net, base_encoder, args.squad, args, folder)
            per[name] = {**said, "squad": squad, "hotpot": hotpot_part(net, args.work, name, folder, label=name),
                         "seconds": time.perf_counter() - started}
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(per[name]) + "\n", encoding="utf-8")
        print(f"{name}: " + "  ".join(f"{f} " + " ".join(f"{statistics.fmean(v['qrag'][m]):.3f}" for m in METRICS)
                                      for f, v in per[name]["squad"].items())
              + f"  hotpot EM@2 {statistics.fmean(per[name]['hotpot']['fact_em_at_sf']):.3f}", file=sys.stderr)
    if args.only is not None:
        return 0
    table = {}
    for name, got in per.items():
        entry = judge(got, per[BASELINE])
        entry.update(model=got["model"], tokens=got["tokens"], precision=got["precision"],
                     int8_weight_bits=got.get("int8_weight_bits"), layers=layers.get(name, ALL_LAYERS),
                     seconds=got["seconds"])
        table[name] = entry
    holding = [n for n in table if n != BASELINE and table[n]["holds"] and table[n]["precision"] == "fp32"]
    chosen = min(holding, key=lambda n: (table[n]["tokens"], table[n]["layers"]), default=BASELINE)
    width = os.environ.get(onnx_engine.INT8_WEIGHTS_ENV)
    result = {"command": " ".join([*([f"{onnx_engine.INT8_WEIGHTS_ENV}={width}"] if width else []), "python",
                                   "experiments/top_layers.py", *(argv or sys.argv[1:])]),
              "machine": machine(), "baseline": args.model,
              "rule": f"holds: HotpotQA val fact EM@2 >= baseline - {EM_TOLERANCE}, every margin to BM25 and the hybrid "
                      f"(hit@1, recall@2/5/10, both files) >= the baseline's - {MARGIN_TOLERANCE}; of those, the fewest "
                      "state tokens, then the fewest trained layers; none: the baseline",
              "chosen": chosen, "candidates": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"chosen: {chosen}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
