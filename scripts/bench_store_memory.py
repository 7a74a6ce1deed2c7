"""Memory from `from_vector_store` through the first answer over a Chroma collection of Wikipedia summaries.

    OMP_NUM_THREADS=2 python scripts/bench_store_memory.py --chunks 10000 --out results/store_memory/chroma_10000.json

The first `--chunks` of the 10 033 installed Wikipedia summaries go into a Chroma collection (its default l2) filled
with all-MiniLM-L6-v2, as a tutorial fills one; then `qrag.eval.store_memory.first_answer_memory` traces qrag's
allocations while it checks the store, reads it for BM25 and answers one question with the shipped paragraph model.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import uuid
from pathlib import Path

from qrag.eval.existing_collections import MiniLMEmbeddings
from qrag.eval.query_cost import rss_kb
from qrag.eval.store_memory import first_answer_memory
from qrag.training.data.wiki import summaries_path
from qrag.training.model.precision import speed_flags
from qrag.training.search import load_model


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--model", default="qrag/hotpotqa-minilm")
    p.add_argument("--question", default="Which composer wrote music for the ballet that premiered in Paris in 1913?")
    p.add_argument("--db", type=Path, default=None, help="a folder to keep the filled collection in (a later run "
                   "with the same --chunks reuses it: filling 10 000 summaries takes about half an hour on 2 cores)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if args.chunks < 1:
        p.error(f"--chunks must be >= 1, got {args.chunks}")
    import chromadb
    from langchain_chroma import Chroma

    pages = list(json.loads(summaries_path().read_text()).values())[: args.chunks]
    texts = [page["extract"] for page in pages]
    ids = [f"w{i}" for i in range(len(texts))]
    started = time.perf_counter()
    embeddings = MiniLMEmbeddings()
    if args.db is None:
        store = Chroma.from_texts(texts, embeddings, ids=ids, client=chromadb.EphemeralClient(),
                                  collection_name=f"mem-{uuid.uuid4().hex[:10]}")
    else:
        store = Chroma(f"summaries-{len(texts)}", embeddings, client=chromadb.PersistentClient(str(args.db)))
        if store._collection.count() != len(texts):
            store.delete_collection()
            store = Chroma.from_texts(texts, embeddings, ids=ids, client=chromadb.PersistentClient(str(args.db)),
                                      collection_name=f"summaries-{len(texts)}")
    filled = time.perf_counter() - started
    before = rss_kb("VmRSS")  # the store and the embedder a user's chain holds already
    result = first_answer_memory(store, load_model(args.model), args.question)
    result |= {"resident_before_model_kib": before, "chunks": len(texts), "seconds_to_fill_the_store": filled, "model": args.model,
               "command": " ".join(["python", *sys.argv]), "machine": platform.processor() or platform.machine(),
               "cpu_flags": speed_flags()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("chunks", "peak_traced_bytes", "held_beside_store")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
