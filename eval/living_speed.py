"""What a living index costs: a filtered hop against an unfiltered one, and adding passages against a rebuild.

- `filtered_hop_times`: one hop (`max_hops=1`, `k=1`, the model's other defaults) over an index of N chunks,
  unfiltered, with a filter met by one chunk in ten (its first call builds the row mask; later calls reuse it),
  and with a predicate (evaluated over every chunk's metadata at each call). The vectors are random unit vectors
  of the model's dimension (a hop's cost does not depend on their values; embedding 400 000 texts on a CPU would
  take hours), the texts short numbered passages.
- `add_versus_build`: `ChunkIndex.from_texts` over `base + added` real passages against `ChunkIndex.add` of the
  `added` to an index of the `base` (the same model and arithmetic), beside embedding the `added` alone (what an
  add should cost), and whether the two indexes rank alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from qrag.training.model.qnet import QNetwork
from qrag.training.search.filters import Filter
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher


def _median_ms(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


ONE_HOP = {"k": 1, "max_hops": 1}


def _per_question(searcher: MultiHopSearcher, questions: Sequence[str], repeats: int, **kw: Any) -> float:
    """The median over questions of each question's median one-hop time."""
    return statistics.median(_median_ms(lambda q=q: searcher.search_one(q, **ONE_HOP, **kw), repeats)  # type: ignore[misc]
                             for q in questions)


def synthetic_index(model: QNetwork, n: int, seed: int = 0) -> ChunkIndex:
    """N random unit vectors of the model's dimension with numbered texts; metadata `group` = row mod 10."""
    g = torch.Generator().manual_seed(seed)
    vectors = torch.nn.functional.normalize(torch.randn(n, model.dim, generator=g), dim=1) / model.config.scale
    texts = [f"Passage {i} of the benchmark corpus." for i in range(n)]
    return ChunkIndex(vectors, texts, metadatas=[{"group": i % 10} for i in range(n)])


def filtered_hop_times(model: QNetwork, sizes: Sequence[int], questions: Sequence[str],
                       repeats: int = 5) -> list[dict[str, Any]]:
    """Per size, the median milliseconds of one hop for each question (medians over `repeats` rounds)."""
    rows = []
    for n in sizes:
        index = synthetic_index(model, n)
        searcher = MultiHopSearcher(model, index)
        searcher.search_one(questions[0], **ONE_HOP)  # warm-up (and the BM25 index, for a model that weighs it)
        where = Filter.from_dict({"group": 3})
        start = time.perf_counter()
        index.mask(where)
        mask_ms = 1000 * (time.perf_counter() - start)

        plain = _per_question(searcher, questions, repeats)
        filtered = _per_question(searcher, questions, repeats, filter=where)
        predicate = _per_question(searcher, questions, repeats, filter=lambda m: m["group"] == 3)
        rows.append({"chunks": n, "hop_ms": plain, "filtered_hop_ms": filtered, "predicate_hop_ms": predicate,
                     "mask_build_ms": mask_ms, "filtered_over_plain": filtered / plain})
    return rows


def add_versus_build(model: QNetwork, base: Sequence[str], added: Sequence[str], questions: Sequence[str],
                     precision: str = "fp32") -> dict[str, Any]:
    """Seconds to build an index of `base + added` from scratch, against adding `added` to one of `base`."""
    start = time.perf_counter()
    full = ChunkIndex.from_texts(model, [*base, *added], precision=precision, show_progress=False)  # type: ignore[arg-type]
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    ChunkIndex.from_texts(model, added, precision=precision, show_progress=False)  # type: ignore[arg-type]
    embed_s = time.perf_counter() - start
    grown = ChunkIndex.from_texts(model, base, precision=precision, show_progress=False)  # type: ignore[arg-type]
    start = time.perf_counter()
    grown.add(model, added, [str(len(base) + i) for i in range(len(added))])
    add_s = time.perf_counter() - start
    same = [[h.chunk.id for h in r.hits] for r in MultiHopSearcher(model, full).search(questions, k=5)] == \
           [[h.chunk.id for h in r.hits] for r in MultiHopSearcher(model, grown).search(questions, k=5)]
    return {"base": len(base), "added": len(added), "build_s": build_s, "add_s": add_s, "embed_added_s": embed_s,
            "add_over_build": add_s / build_s, "add_over_embed": add_s / embed_s, "same_rankings": same,
            "precision": precision}


def living_table(hops: list[dict[str, Any]], grow: dict[str, Any] | None) -> str:
    """Markdown tables of both measures."""
    lines = ["| chunks | hop (ms) | filtered hop (ms) | ratio | predicate hop (ms) | mask build (ms) |",
             "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['chunks']:,} | {r['hop_ms']:.1f} | {r['filtered_hop_ms']:.1f} | {r['filtered_over_plain']:.2f} | "
              f"{r['predicate_hop_ms']:.1f} | {r['mask_build_ms']:.1f} |" for r in hops]
    if grow:
        lines += ["", "| base | added | build from scratch (s) | add (s) | embed the added alone (s) | add / build | "
                      "add / embed | same rankings |", "|---:|---:|---:|---:|---:|---:|---:|:---:|",
                  f"| {grow['base']:,} | {grow['added']:,} | {grow['build_s']:.1f} | {grow['add_s']:.1f} | "
                  f"{grow['embed_added_s']:.1f} | {grow['add_over_build']:.3f} | {grow['add_over_embed']:.2f} | "
                  f"{'yes' if grow['same_rankings'] else 'no'} |"]
    return "\n".join(lines)
