"""qrag over the all-MiniLM-L6-v2 collections users already have, against `from_texts` over the same passages.

    OMP_NUM_THREADS=2 python scripts/bench_existing_collections.py --squad new_wiki_v1.0.json \\
        --out results/existing_collections/new_wiki.json

Every paragraph of a SQuAD-format validation file (SQuADShifts' new_wiki or amazon_reviews; NYT, Reddit and SQuAD
dev are evaluation only and refused) is put into Chroma (default l2), InMemoryVectorStore (cosine) and FAISS (L2),
filled with all-MiniLM-L6-v2; `--questions` of its questions (drawn with `--seed`) are searched at k = `--k` over
each through `QRAGRetriever.from_vector_store`, with the model's BM25 evidence and with Q alone, and over
`from_texts` (long passages by their best window, the default, and cut). Recall@k, hit@1, the share of questions
returning from_texts' ids in its order and the largest |ΔQ| go to JSON (qrag.eval.existing_collections).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

from qrag.eval.existing_collections import STORES, run_existing_collections, table
from qrag.eval.ordinary_text_data import load_squad
from qrag.training.data.evaluation_only import EvaluationOnlyError, refuse_evaluation_only
from qrag.training.model.precision import speed_flags
from qrag.training.search import load_model


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--squad", required=True, help="a SQuAD-format validation file (new_wiki or amazon_reviews)")
    p.add_argument("--model", default="qrag/hotpotqa-minilm")
    p.add_argument("--questions", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--pool", type=int, default=None, help="passages searched (every gold one, the rest drawn); "
                   "default: all the file's")
    p.add_argument("--stores", default=",".join(STORES), help=f"comma-separated, of {', '.join(STORES)}")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    stores = [s for s in args.stores.split(",") if s]
    if unknown := sorted(set(stores) - set(STORES)):
        p.error(f"--stores {unknown}: the stores are {', '.join(STORES)}")
    if args.questions < 1 or args.k < 1 or (args.pool is not None and args.pool < 1):
        p.error("--questions, --k and --pool must be >= 1")
    try:
        refuse_evaluation_only(args.squad, "--squad", "Pass SQuADShifts' new_wiki or amazon_reviews file")
    except EvaluationOnlyError as e:
        p.error(str(e))
    pool = load_squad(args.squad, args.questions, args.seed)
    result = run_existing_collections(pool, load_model(args.model), k=args.k, stores=stores, pool_size=args.pool,
                                      seed=args.seed)
    argv = [Path(a).name if a == args.squad else a for a in sys.argv[1:]]  # the file by its name, not its folder
    result = {"command": " ".join(["python", "scripts/bench_existing_collections.py", *argv]),
              "file": Path(args.squad).name, "model": args.model,
              "machine": {"processor": platform.processor() or platform.machine(), "cpu_flags": speed_flags(),
                          "threads": torch.get_num_threads(), "python": platform.python_version(),
                          "torch": torch.__version__,
                          "note": "a shared machine: the seconds are noisy, the quality figures are not"},
              **result}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
