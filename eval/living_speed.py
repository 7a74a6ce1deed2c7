"""What a living index costs: a filtered hop against an unfiltered one, and adding passages against a rebuild.

- `filtered_hop_times`: one hop (`max_hops=1`, `k=1`, the model's other defaults) over an index of N chunks,
  unfiltered, with a filter met by one chunk in ten (its first call builds the row mask; later calls reuse it),
  and with a predicate (evaluated over every chunk's metadata at each call). The vectors are random unit vectors
  of the model's dimension (a hop's cost does not depend on their values; embedding 400 000 texts on a CPU would
  take hours), the texts short numbered passages.
- `add_versus_build`: `ChunkIndex.from_texts` over `base + added` real passages against `ChunkIndex.add` of the
  `added` to an index of the `base` (the same model and arithmetic), beside embedding the `added` alone (what an
  add should cost), and whether the two indexes rank alike.
- `update_costs`: `ChunkIndex.add_vectors` of 1, 100, 10 000 chunks (vectors already computed, so the index's own
  work is what is timed: the vector buffer, the ids, the BM25 segment) into indexes of 10 000 to 400 000 chunks with
  BM25, against building the index with its BM25 from scratch over all of them; and `add_one_cost`, `ChunkIndex.add`
  of one real passage (embedding included) into indexes of growing size: what a user adding documents one at a time
  pays.
- `mask_memory`: the process's resident memory over many distinct filters on one index, with the mask cache's
  default bound and with every mask kept (what a cache without a bound held).
- `filtered_after_add`: one tenant's filtered hop right after `ChunkIndex.add_vectors` of one chunk, against the same
  hop before the add (its mask cached), in indexes of growing size whose metadata name one of 100 tenants; beside
  it, the hop with a filter not seen before (what every filter paid after every add while masks did not carry).
"""

from __future__ import annotations

import itertools
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from qrag.training.model.qnet import QNetwork
from qrag.training.search.filters import Filter
from qrag.training.search.index import MASK_CACHE_SIZE, ChunkIndex
from qrag.training.search.lexical import LexicalIndex
from qrag.training.search.searcher import MultiHopSearcher


def _median_ms(call: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter) -> float:
    times = []
    for _ in range(repeats):
        start = clock()
        call()
        times.append(clock() - start)
    return 1000 * statistics.median(times)


ONE_HOP = {"k": 1, "max_hops": 1}


def _per_question(searcher: MultiHopSearcher, questions: Sequence[str], repeats: int,
                  clock: Callable[[], float] = time.perf_counter, **kw: Any) -> float:
    """The median over questions of each question's median one-hop time."""
    return statistics.median(_median_ms(lambda q=q: searcher.search_one(q, **ONE_HOP, **kw), repeats,  # type: ignore[misc]
                                        clock) for q in questions)


def synthetic_index(model: QNetwork, n: int, seed: int = 0) -> ChunkIndex:
    """N random unit vectors of the model's dimension with numbered texts; metadata `group` = row mod 10."""
    g = torch.Generator().manual_seed(seed)
    vectors = torch.nn.functional.normalize(torch.randn(n, model.dim, generator=g), dim=1) / model.config.scale
    texts = [f"Passage {i} of the benchmark corpus." for i in range(n)]
    return ChunkIndex(vectors, texts, metadatas=[{"group": i % 10} for i in range(n)])


def filtered_hop_times(model: QNetwork, sizes: Sequence[int], questions: Sequence[str], repeats: int = 5,
                       clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Per size, the median milliseconds of one hop for each question (medians over `repeats` rounds); `clock`
    reads seconds before and after each timed span."""
    rows = []
    for n in sizes:
        index = synthetic_index(model, n)
        searcher = MultiHopSearcher(model, index)
        searcher.search_one(questions[0], **ONE_HOP)  # warm-up (and the BM25 index, for a model that weighs it)
        where = Filter.from_dict({"group": 3})
        start = clock()
        index.mask(where)
        mask_ms = 1000 * (clock() - start)

        plain = _per_question(searcher, questions, repeats, clock)
        filtered = _per_question(searcher, questions, repeats, clock, filter=where)
        predicate = _per_question(searcher, questions, repeats, clock, filter=lambda m: m["group"] == 3)
        rows.append({"chunks": n, "hop_ms": plain, "filtered_hop_ms": filtered, "predicate_hop_ms": predicate,
                     "mask_build_ms": mask_ms, "filtered_over_plain": filtered / plain})
    return rows


def add_versus_build(model: QNetwork, base: Sequence[str], added: Sequence[str], questions: Sequence[str],
                     precision: str = "fp32", clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Seconds to build an index of `base + added` from scratch, against adding `added` to one of `base`."""
    start = clock()
    full = ChunkIndex.from_texts(model, [*base, *added], precision=precision, show_progress=False)  # type: ignore[arg-type]
    build_s = clock() - start
    start = clock()
    ChunkIndex.from_texts(model, added, precision=precision, show_progress=False)  # type: ignore[arg-type]
    embed_s = clock() - start
    grown = ChunkIndex.from_texts(model, base, precision=precision, show_progress=False)  # type: ignore[arg-type]
    start = clock()
    grown.add(model, added, [str(len(base) + i) for i in range(len(added))])
    add_s = clock() - start
    same = [[h.chunk.id for h in r.hits] for r in MultiHopSearcher(model, full).search(questions, k=5)] == \
           [[h.chunk.id for h in r.hits] for r in MultiHopSearcher(model, grown).search(questions, k=5)]
    return {"base": len(base), "added": len(added), "build_s": build_s, "add_s": add_s, "embed_added_s": embed_s,
            "add_over_build": add_s / build_s, "add_over_embed": add_s / embed_s, "same_rankings": same,
            "precision": precision}


def _vectors(model: QNetwork, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, model.dim, generator=g), dim=1) / model.config.scale  # (n, D)


def distinct_texts(passages: Sequence[str], n: int) -> list[str]:
    """`n` distinct texts: the passages in turn, each pass's copies told apart by a number at the end."""
    return [f"{p} ({i // len(passages)})" if i >= len(passages) else p
            for i, p in zip(range(n), itertools.cycle(passages), strict=False)]


def update_costs(model: QNetwork, passages: Sequence[str], bases: Sequence[int], adds: Sequence[int],
                 repeats: int = 3, clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Per base size and batch size: median seconds of `add_vectors` of the batch into an index of `base` chunks with
    BM25 (a fresh index each repeat) against building one over `base + batch` from scratch (vectors given)."""
    rows = []
    for base in bases:
        texts = distinct_texts(passages, base + max(adds))
        vectors = _vectors(model, len(texts), seed=base)
        lexical = LexicalIndex.from_texts(texts[:base])  # immutable: each repeat's index starts from it
        for m in adds:
            ids = [f"n{i}" for i in range(m)]
            add_s = []
            for _ in range(repeats):
                index = ChunkIndex(vectors[:base], texts[:base], lexical=lexical)
                t0 = clock()
                index.add_vectors(vectors[base : base + m], texts[base : base + m], ids)
                add_s.append(clock() - t0)
            build_s = []
            for _ in range(1 if base + m > 100_000 else repeats):
                t0 = clock()
                ChunkIndex(vectors[: base + m], texts[: base + m], lexical=LexicalIndex.from_texts(texts[: base + m]))
                build_s.append(clock() - t0)
            add, build = statistics.median(add_s), statistics.median(build_s)
            rows.append({"base": base, "added": m, "add_s": add, "build_s": build, "add_over_build": add / build})
    return rows


def add_one_cost(model: QNetwork, passages: Sequence[str], sizes: Sequence[int], adds: int = 20,
                 clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Per index size: the median seconds of `ChunkIndex.add` of one real passage (embedded by `model`) into an index
    of that many chunks with BM25, over `adds` single adds, beside embedding that passage alone."""
    rows = []
    extra = list(passages[:adds])
    for n in sizes:
        texts = distinct_texts(passages[adds:], n)
        index = ChunkIndex(_vectors(model, n, seed=n), texts, lexical=LexicalIndex.from_texts(texts))
        add_s, embed_s = [], []
        for i, text in enumerate(extra):
            t0 = clock()
            model.embed_chunks([text])
            embed_s.append(clock() - t0)
            t0 = clock()
            index.add(model, [text], [f"one{i}"])
            add_s.append(clock() - t0)
        rows.append({"chunks": n, "add_one_ms": 1000 * statistics.median(add_s),
                     "embed_one_ms": 1000 * statistics.median(embed_s)})
    return rows


def _rss_mib() -> float:
    """The process's resident memory now (Linux `/proc`; elsewhere its peak, from `getrusage`)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def mask_memory(model: QNetwork, n: int, filters: int) -> list[dict[str, Any]]:
    """Resident memory of an index of `n` chunks (metadata `user` = row mod 5 000) before and after the masks of
    `filters` distinct filters `{"user": i}` (each built, then reused once), and how many masks it then holds: with
    a bound above `filters` (every mask kept, as an unbounded cache would), then with the default bound."""
    rows = []
    for size in (filters + 1, MASK_CACHE_SIZE):  # the unbounded first: its growth is not hidden by freed memory
        index = ChunkIndex(_vectors(model, n, seed=1), [f"Passage {i}." for i in range(n)],
                           metadatas=[{"user": i % 5000} for i in range(n)], mask_cache_size=size)
        before = _rss_mib()
        for i in range(filters):
            where = Filter.from_dict({"user": i})
            index.mask(where)
            index.mask(where)
        after = _rss_mib()
        held = len(index._version.masks)
        rows.append({"chunks": n, "filters": filters, "mask_cache_size": size, "masks_held": held,
                     "masks_mib": held * n / 2**20,
                     "rss_before_mib": before, "rss_after_mib": after, "rss_growth_mib": after - before,
                     "bound_mib": size * n / 2**20})
        del index
    return rows


def _hop_ms(searcher: MultiHopSearcher, question: str, where: Filter, clock: Callable[[], float]) -> float:
    start = clock()
    searcher.search_one(question, **ONE_HOP, filter=where)
    return 1000 * (clock() - start)


def filtered_after_add(model: QNetwork, sizes: Sequence[int], questions: Sequence[str], repeats: int = 7,
                       tenants: int = 100, clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Per index size N (random unit vectors, metadata `tenant` = row mod `tenants`, one hop as `filtered_hop_times`
    times it), over `repeats` rounds of: tenant 7's filtered hop (its mask cached), an add of one chunk
    (`add_vectors`), the same hop right after it, and a hop with a filter never asked before (its mask built from
    every row's metadata): the median milliseconds of each; and the index's own
    part: `ChunkIndex.mask` of the cached filter right after an add, against a mask built from scratch. `clock` reads
    seconds before and after each timed span."""
    rows = []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        vectors = torch.nn.functional.normalize(torch.randn(n, model.dim, generator=g), dim=1) / model.config.scale
        index = ChunkIndex(vectors, [f"Passage {i} of the benchmark corpus." for i in range(n)],
                           metadatas=[{"tenant": f"t{i % tenants}"} for i in range(n)])
        searcher = MultiHopSearcher(model, index)
        where = Filter.from_dict({"tenant": "t7"})
        searcher.search_one(questions[0], **ONE_HOP, filter=where)  # warm-up: the BM25 index, the mask
        before, after, new_filter = [], [], []
        for i in range(repeats):  # interleaved, so a busy machine slows each kind alike
            question = questions[i % len(questions)]
            before.append(_hop_ms(searcher, question, where, clock))
            new = torch.nn.functional.normalize(torch.randn(1, model.dim, generator=g), dim=1) / model.config.scale
            index.add_vectors(new, [f"Added passage {i}."], [f"added{i}"], [{"tenant": "t7"}])
            after.append(_hop_ms(searcher, question, where, clock))
            new_filter.append(_hop_ms(searcher, question, Filter.from_dict({"tenant": f"t{20 + i}"}), clock))
        mask_after, mask_new = [], []  # the index's own part: the mask after an add, and one built from scratch
        for i in range(repeats):
            new = torch.nn.functional.normalize(torch.randn(1, model.dim, generator=g), dim=1) / model.config.scale
            index.add_vectors(new, [f"Added passage {repeats + i}."], [f"more{i}"], [{"tenant": "t7"}])
            start = clock()
            index.mask(where)
            mask_after.append(1000 * (clock() - start))
            start = clock()
            index.mask(Filter.from_dict({"tenant": f"t{40 + i}"}))
            mask_new.append(1000 * (clock() - start))
        b, a, c = statistics.median(before), statistics.median(after), statistics.median(new_filter)
        rows.append({"chunks": n, "tenants": tenants, "before_add_ms": b, "after_add_ms": a, "after_over_before": a / b,
                     "new_filter_ms": c, "new_filter_over_before": c / b, "before_add_each_ms": before,
                     "after_add_each_ms": after, "mask_after_add_ms": statistics.median(mask_after),
                     "new_mask_ms": statistics.median(mask_new)})
    return rows


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
