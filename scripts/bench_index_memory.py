"""What indexing passages leaves in memory: `from_texts` with the CPU engine's large passes handing their working
memory back (as shipped) or keeping it, side by side (`qrag.eval.index_memory`).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_index_memory.py --size 400 --rounds 3 \\
        --threads 1 --out results/index_memory/summaries_400.json

The shipped paragraph model is loaded once as it serves by default ('auto'); each round builds
`QRAGRetriever.from_texts(slice, model=it, k=5)` over a fresh slice of the installed Wikipedia summaries each way.
Writes each round's seconds and resident size, the medians and their ratio, with the CPU's flags.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from qrag.eval.index_memory import index_rounds
from qrag.eval.ordinary_text import machine
from qrag.eval.query_cost import rss_kb
from qrag.integrations import QRAGRetriever
from qrag.training.data.wiki import summaries_path
from qrag.training.search import load_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=400, help="passages a round indexes, each way")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default="qrag/hotpotqa-minilm")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    texts = [page["extract"] for page in json.loads(summaries_path().read_text(encoding="utf-8")).values()]
    before = rss_kb("VmRSS")
    net = load_model(args.model, precision="auto")
    try:
        result = index_rounds(texts, lambda part: QRAGRetriever.from_texts(list(part), model=net, k=5),
                              rounds=args.rounds, size=args.size)
    except ValueError as e:
        ap.error(str(e))
    result |= {"command": " ".join(["python", *sys.argv]), "machine": machine(), "threads": args.threads,
               "model": args.model, "serving": net.engine_why, "resident_before_model_kib": before}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("median_seconds", "median_resident_kib", "seconds_ratio")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
