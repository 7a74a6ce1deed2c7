"""A filtered hop against an unfiltered one, adding passages against rebuilding, what each update costs by index
size, and the memory many filters take (`qrag.eval.living_speed`).

    python scripts/bench_living_index.py --out results/living_index/living_index.json
    python scripts/bench_living_index.py --sizes 50000 --skip-add   # the hop times only
    python scripts/bench_living_index.py --skip-hops                 # adding against building only
    python scripts/bench_living_index.py --only updates,memory --out results/living_index/updates.json
    python scripts/bench_living_index.py --only after_add --after-sizes 10000,100000,400000 \
        --out results/living_index/after_add.json  # a filtered search right after an add against before it

Prints Markdown tables and writes JSON with the machine (CPU flags, threads, torch).
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from qrag.eval.living_speed import (
    add_one_cost,
    add_versus_build,
    filtered_after_add,
    filtered_hop_times,
    living_table,
    mask_memory,
    update_costs,
)
from qrag.training.data import hotpot_pool
from qrag.training.data.wiki import read_pages
from qrag.training.model.precision import speed_flags
from qrag.training.search import load_model

QUESTIONS = ["Which magazine was started first, Arthur's Magazine or First for Women?",
             "What government position was held by the woman who portrayed Corliss Archer in Kiss and Tell?",
             "Were Scott Derrickson and Ed Wood of the same nationality?",
             "The director of the romantic comedy Big Stone Gap is based in what New York city?",
             "Which airport is closer to the city centre, Gatwick or Stansted?"]


def real_passages(n: int) -> list[str]:
    """`n` distinct real passages: the HotpotQA pool's training and validation passages (never the rows held out
    for evaluation), then the Wikipedia summaries'."""
    pool = hotpot_pool.load_pool().pools
    passages = list(dict.fromkeys([*pool["val"], *(page.chunk for page in read_pages().values())]))
    if len(passages) < n:
        raise SystemExit(f"only {len(passages)} real passages are installed; ask for at most that many.")
    return passages[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qrag/hotpotqa-minilm")
    parser.add_argument("--sizes", default="50000,400000", help="index sizes for the hop times, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--base", type=int, default=20000, help="passages already indexed")
    parser.add_argument("--added", type=int, default=1000, help="passages added")
    parser.add_argument("--precision", default="fp32", help="indexing arithmetic (fp32, bf16)")
    parser.add_argument("--skip-add", action="store_true")
    parser.add_argument("--skip-hops", action="store_true")
    parser.add_argument("--update-bases", default="10000,100000,400000", help="index sizes an update goes into")
    parser.add_argument("--update-adds", default="1,100,10000", help="chunks each update adds")
    parser.add_argument("--one-sizes", default="5000,20000,100000", help="index sizes for adding one passage")
    parser.add_argument("--memory-chunks", type=int, default=100_000)
    parser.add_argument("--memory-filters", type=int, default=2000)
    parser.add_argument("--after-sizes", default="10000,100000,400000",
                        help="index sizes for a filtered hop right after an add")
    parser.add_argument("--only", default="hops,add,updates,one,memory,after_add",
                        help="which measures to run, comma-separated (hops, add, updates, one, memory, after_add)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args.model)
    only = set(args.only.split(","))
    hops = [] if args.skip_hops or "hops" not in only else filtered_hop_times(
        model, [int(s) for s in args.sizes.split(",")], QUESTIONS, args.repeats)
    grow = None
    if not args.skip_add and "add" in only:
        texts = real_passages(args.base + args.added)
        grow = add_versus_build(model, texts[: args.base], texts[args.base :], QUESTIONS, args.precision)
    print(living_table(hops, grow))
    passages = real_passages(20_000) if only & {"updates", "one"} else []
    updates = (update_costs(model, passages, [int(s) for s in args.update_bases.split(",")],
                            [int(s) for s in args.update_adds.split(",")]) if "updates" in only else [])
    for r in updates:
        print(f"add {r['added']:>6,} to {r['base']:>7,}: {r['add_s'] * 1000:9.1f} ms; build {r['build_s']:7.2f} s; "
              f"ratio {r['add_over_build']:.5f}")
    one = add_one_cost(model, passages, [int(s) for s in args.one_sizes.split(",")]) if "one" in only else []
    for r in one:
        print(f"add one passage to {r['chunks']:>7,}: {r['add_one_ms']:.1f} ms (embedding it alone {r['embed_one_ms']:.1f} ms)")
    memory = mask_memory(model, args.memory_chunks, args.memory_filters) if "memory" in only else []
    for r in memory:
        print(f"{r['filters']} filters over {r['chunks']:,} chunks, cache of {r['mask_cache_size']}: {r['masks_held']} "
              f"masks held, RSS +{r['rss_growth_mib']:.1f} MiB (bound {r['bound_mib']:.1f} MiB)")
    after_add = (filtered_after_add(model, [int(s) for s in args.after_sizes.split(",")], QUESTIONS, args.repeats)
                 if "after_add" in only else [])
    for r in after_add:
        print(f"{r['chunks']:>7,} chunks: a tenant's filtered hop {r['before_add_ms']:.1f} ms before an add, "
              f"{r['after_add_ms']:.1f} ms right after (x{r['after_over_before']:.2f}); a filter never asked "
              f"{r['new_filter_ms']:.1f} ms (x{r['new_filter_over_before']:.2f}); its mask after an add "
              f"{r['mask_after_add_ms']:.2f} ms, a new one {r['new_mask_ms']:.1f} ms")
    if args.out:
        machine = {"cpu": platform.processor() or platform.machine(), "flags": speed_flags(),
                   "threads": torch.get_num_threads(), "torch": torch.__version__}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"model": args.model, "machine": machine, "hops": hops, "add": grow,
                                        "updates": updates, "add_one": one, "mask_memory": memory,
                                        "filtered_after_add": after_add},
                                       indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
