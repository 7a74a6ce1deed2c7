"""What indexing costs before the encoder: the chunk-length check and the tokenisation of a corpus, side by side.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_tokenise.py --texts 50000 --repeats 5 --out results/bench_tokenise.json

`ChunkIndex.from_texts` (and the embeddings adapters) check chunk lengths, then embed. Two ways of tokenising for
that, on the same background sentences of the text sources, with the model's tokenizer (MiniLM, 32 tokens):
- `two passes`: the whole texts for the check (`token_rows(…, None)`), then the cut rows for embedding;
- `one pass`: `token_rows_and_lengths`, the cut rows and the whole lengths from one call (what qrag does).
Prints the median seconds and texts/s of each and their ratio; writes JSON. On a GPU this is the host's share of
indexing (the encoder's own pass over 50 000 32-token chunks takes a fraction of a second there).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from qrag.training.data.text_sources import background_sentences
from qrag.training.model.towers import token_rows, token_rows_and_lengths
from qrag.training.search.searcher import load_model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qrag/babilong-minilm-cpu")
    parser.add_argument("--texts", type=int, default=50000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="results/bench_tokenise.json")
    args = parser.parse_args()
    texts = background_sentences(args.texts, random.Random(0))
    model = load_model(args.model)
    tokenizer, limit = model.tokenizer, model.config.max_chunk_tokens
    ways = {
        "two passes": lambda: (token_rows(tokenizer, texts, None), token_rows(tokenizer, texts, limit)),
        "one pass": lambda: token_rows_and_lengths(tokenizer, texts, limit),
    }
    for way in ways.values():  # warm-up: the backend copies are built on the first call
        way()
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            seconds[name].append(time.perf_counter() - start)
    table = {name: {"median_s": statistics.median(s), "texts_per_s": args.texts / statistics.median(s), "runs_s": s}
             for name, s in seconds.items()}
    ratio = table["two passes"]["median_s"] / table["one pass"]["median_s"]
    for name, row in table.items():
        print(f"{name:<12}{row['median_s']:>8.3f} s{row['texts_per_s']:>12,.0f} texts/s")
    print(f"one pass is {ratio:.2f}x faster")
    result = {"command": "python scripts/bench_tokenise.py " + " ".join(sys.argv[1:]),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
              "texts": args.texts, "max_chunk_tokens": limit, "ways": table, "speedup": ratio}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
