"""Q-RAG at scale, one process: fact EM / recall from 32K to 10M tokens, indexing throughput, hop latency.

For each (task, length), on the same generated test episodes and the same trained checkpoint:

- `qrag`       greedy search through the hop engine (`search_corpora`), exactly |SF| results (all of them
               hops), no stop rule;
- `qrag+stop`  the same, adaptive: at most --max-hops hops, the stop rule at --stop-threshold;
- `dense`      single-hop dense retrieval with the untrained base encoder (as `qrag-eval`'s `dense`), top |SF|;
- `bm25`       Okapi BM25 (bm25s' defaults: Lucene idf, k1 1.5, b 0.75, English stop words), top |SF|.

Fact EM = every supporting chunk retrieved; recall / precision / F1 over chunk indices (METHOD.md §5).
For NIAH, recall is the retrieval side of RULER's "fraction of gold values present" (no reader here).

At each --latency-lengths length, before the accuracy cells: one haystack (sample 0 of the first task)
is indexed from scratch with `ChunkIndex.from_texts` (tokenisation included) to give indexing throughput
(chunks/s) and an *estimate* of the fraction of the GPU's bf16 peak it reaches (FLOPs per chunk ≈
2 × non-embedding parameters × real tokens + attention, against the spec peak and a matrix product measured
in the same run). Then single-query latency and batched queries/s for 1…6 hops on that index.

How the haystacks are built (what keeps a 10M-token cell to minutes):
- Episodes are the library's own (`babilong_episode` / `niah_episode` with the per-sample seeds of
  `iter_babilong` / `iter_niah`, split 'test'), generated in forked worker processes (a 10M-token episode
  is ~1 s of CPU) and shipped back compactly: each chunk as a row of the *sentence universe* (every
  sentence of the text sources, ~109 000) or as one of the episode's own extra texts (facts, needles, noise).
- A chunk vector depends only on its text, so every universe sentence is embedded once per model and
  gathered per episode: a 10M-token haystack (400 000 chunks, ~3.7 passes over the ~109 000 sentences
  with the library's book shuffling) costs an index gather, not 400 000 encoder passes. Facts and
  needles are embedded per episode. Each episode keeps its own random background, offset and fact
  placement; only the encoder work is shared. The indexing-throughput figure comes from the from-scratch
  index above, not from this cache.

Writes --out (JSON) after every cell, so a run stopped by --time-budget or a kill keeps what it finished.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from offline import maybe_install_text_pack  # noqa: E402

SPEC_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "H800": 989.4,
                    "A100": 312.0, "L40S": 362.0, "L4": 121.0}
"""Dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets, by GPU name fragment."""
BENCH_SOURCES = {"babilong": None, "ruler": ("britannica", "wikipedia")}  # None: all four text sources
DEFAULT_MAX_HOPS = {"babilong": 6, "ruler": 5}  # the presets' env.max_hops
METHODS = ("qrag", "qrag+stop", "dense", "bm25")


# ---------------------------------------------------------------------------------------- episodes
def bench_tasks(bench: str) -> tuple[str, ...]:
    if bench == "babilong":
        from qrag.training.data.babi import TASKS

        return tuple(TASKS)
    from qrag.training.data.ruler import NIAH_TASKS

    return tuple(NIAH_TASKS)


def bench_sources(bench: str, sources: str | None) -> tuple[str, ...]:
    from qrag.training.data.text_sources import TEXT_SOURCES

    if sources:
        return tuple(s.strip() for s in sources.split(",") if s.strip())
    default = BENCH_SOURCES[bench]
    return tuple(TEXT_SOURCES) if default is None else default


def length_tokens(length: str) -> int:
    from qrag.training.data.babilong import parse_length

    return parse_length(length)


def num_sentences(bench: str, length: str) -> int | None:
    """Sentences per BabiLong haystack (BENCHMARKS.md §2 table); NIAH fills a token budget instead."""
    from qrag.training.data.babilong import sentences_for_tokens

    return sentences_for_tokens(length_tokens(length)) if bench == "babilong" else None


_BABI: dict[tuple[str, str, int], tuple[list[Any], Iterator[Any]]] = {}


def babi_sample(task: str, split: str, seed: int, i: int) -> Any:
    """Sample i of the bAbI stream `iter_babilong` draws from (kept per process, extended on demand)."""
    from qrag.training.data.babi import iter_samples

    key = (task, split, seed)
    if key not in _BABI:
        _BABI[key] = ([], iter(iter_samples(task, seed=seed, split=split)))  # type: ignore[arg-type]
    done, stream = _BABI[key]
    while len(done) <= i:
        done.append(next(stream))
    return done[i]


def make_episode(bench: str, task: str, length: str, split: str, seed: int, i: int, sources: Sequence[str]) -> Any:
    """Episode i of `load_episodes(source, task=, split=, seed=, num_sentences|num_tokens=, sources=)`.

    Built directly (sample i alone, not the i before it) with the per-sample seeds of `iter_babilong` /
    `iter_niah`; tests/gpu_scripts checks it equals the library's episode of id index i. None where the
    library skips the sample (a bAbI story with more facts than the haystack has sentences).
    """
    if bench == "babilong":
        from qrag.training.data.babilong import babilong_episode

        n = num_sentences(bench, length)
        assert n is not None
        sample = babi_sample(task, split, seed, i)
        if len(sample.facts) > n:
            return None
        rng = random.Random(f"qrag-babilong/{task}/{split}/{seed}/{i}")
        return babilong_episode(sample, n, rng, sources=sources, id=f"babilong-{task}-{split}-{seed}-{i}")
    from qrag.training.data.ruler import niah_episode

    rng = random.Random(f"qrag-ruler/{task}/{split}/{seed}/{i}")
    return niah_episode(task, rng, num_tokens=length_tokens(length), sources=sources, id=f"ruler-{task}-{split}-{seed}-{i}")


class Universe:
    """Every sentence of the text sources once, numbered in a fixed order (the same in every process)."""

    def __init__(self, sources: Sequence[str]) -> None:
        from qrag.training.data import text_sources as ts

        self.texts: list[str] = []
        self.row: dict[str, int] = {}
        for name in sources:
            pool = ts.sentence_pool(name)
            pool.split_all()
            for d, doc in enumerate(pool.documents):
                for p in range(len(doc.paragraphs)):
                    for s in pool.sentences(d, p):
                        if s not in self.row:
                            self.row[s] = len(self.texts)
                            self.texts.append(s)

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class Compact:
    """An episode as universe rows (>= 0) and its own extra texts (row -(j+1) is extras[j])."""

    id: str
    question: str
    supporting: tuple[int, ...]
    answer: str | None
    metadata: dict[str, Any]
    rows: np.ndarray  # (N,) int32
    extras: list[str]
    seconds: float = 0.0

    @property
    def num_chunks(self) -> int:
        return int(self.rows.shape[0])


def compact(episode: Any, universe: Universe, seconds: float = 0.0) -> Compact:
    get = universe.row.get
    rows = np.fromiter((get(c, -1) for c in episode.chunks), dtype=np.int32, count=len(episode.chunks))
    extras: dict[str, int] = {}
    for j in np.flatnonzero(rows < 0).tolist():
        c = episode.chunks[j]
        rows[j] = -(extras.setdefault(c, len(extras)) + 1)
    return Compact(episode.id, episode.question, tuple(episode.supporting), episode.answer, dict(episode.metadata),
                   rows, list(extras), seconds)


class Texts(Sequence[str]):
    """The chunk texts of a `Compact` episode, looked up on demand (no 400 000-string list)."""

    def __init__(self, ep: Compact, universe: Universe) -> None:
        self.rows, self.extras, self.universe = ep.rows, ep.extras, universe.texts

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        r = int(self.rows[i])
        return self.universe[r] if r >= 0 else self.extras[-r - 1]


_WORKER_UNIVERSE: Universe | None = None


def _generate(job: tuple[str, str, str, str, int, int, tuple[str, ...]]) -> Compact | None:
    bench, task, length, split, seed, i, sources = job
    start = time.perf_counter()
    ep = make_episode(bench, task, length, split, seed, i, sources)
    assert _WORKER_UNIVERSE is not None
    return None if ep is None else compact(ep, _WORKER_UNIVERSE, time.perf_counter() - start)


# ---------------------------------------------------------------------------------------- vectors
def row_chunk(texts: Sequence[str], row: int) -> Any:
    """The chunk at `row` of a haystack (its position is its row)."""
    from qrag.training.index import Chunk

    return Chunk(str(row), texts[row], position=row)


class VectorCache:
    """Chunk-tower vectors of universe sentences, embedded once per model; extras embedded per episode."""

    def __init__(self, model: Any, universe: Universe, device: Any, amp: Any, batch: int) -> None:
        import torch

        self.model, self.universe, self.device, self.amp, self.batch = model, universe, device, amp, batch
        self.table = torch.zeros(len(universe), model.dim, device=device)
        self.have = np.zeros(len(universe), dtype=bool)
        self.embedded = 0

    def embed(self, texts: Sequence[str]) -> Any:
        with self.amp():
            out = self.model.embed_chunks(list(texts), batch_size=self.batch)
        self.embedded += len(texts)
        return out

    def seed(self, rows: np.ndarray, vectors: Any) -> None:
        import torch

        keep = np.flatnonzero(rows >= 0)
        r = rows[keep]
        self.table[torch.from_numpy(r).long().to(self.device)] = vectors[torch.from_numpy(keep).to(vectors.device)].to(
            self.table.device)
        self.have[r] = True

    def vectors(self, ep: Compact) -> Any:
        import torch

        need = np.unique(ep.rows[ep.rows >= 0])
        need = need[~self.have[need]]
        if need.size:
            self.table[torch.from_numpy(need).long().to(self.device)] = self.embed([self.universe.texts[i] for i in need])
            self.have[need] = True
        idx = torch.from_numpy(ep.rows).long().to(self.device)
        out = self.table[idx.clamp(min=0)]
        if ep.extras:
            neg = idx < 0
            out[neg] = self.embed(ep.extras)[-idx[neg] - 1]
        return out


# ---------------------------------------------------------------------------------------- BM25
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def _stopwords() -> frozenset[str]:
    try:
        from bm25s.stopwords import STOPWORDS_EN
    except ImportError as e:
        raise ImportError("the bm25 baseline uses bm25s' English stop words: pip install 'qrag[eval]' (or bm25s)") from e
    return frozenset(STOPWORDS_EN)


class BM25:
    """Okapi BM25 with bm25s' defaults (tokens `(?u)\\b\\w\\w+\\b` lower-cased minus English stop words,
    Lucene idf log(1 + (N − df + .5)/(df + .5)), k1 1.5, b 0.75), scored over one episode's chunks.

    Universe sentences are tokenised once; per episode only the query terms' columns are gathered, so a
    400 000-chunk haystack costs a few array operations per query term. tests/gpu_scripts checks the
    scores equal `bm25s.BM25().get_scores`.
    """

    def __init__(self, universe: Universe, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.stop = _stopwords()
        self.universe = universe
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        self.lengths = np.zeros(0)
        self._dense: dict[str, np.ndarray] = {}

    def tokens(self, text: str) -> list[str]:
        return [t for t in _TOKEN.findall(text.lower()) if t not in self.stop]

    def _build(self) -> None:
        post: dict[str, tuple[list[int], list[int]]] = {}
        lengths = np.zeros(len(self.universe), dtype=np.float64)
        for r, text in enumerate(self.universe.texts):
            toks = self.tokens(text)
            lengths[r] = len(toks)
            for t, c in Counter(toks).items():
                rows, tfs = post.setdefault(t, ([], []))
                rows.append(r)
                tfs.append(c)
        self.postings = {t: (np.asarray(r, dtype=np.int64), np.asarray(c, dtype=np.float64)) for t, (r, c) in post.items()}
        self.lengths = lengths

    def _column(self, term: str) -> np.ndarray:
        col = self._dense.get(term)
        if col is None:
            assert self.postings is not None
            col = np.zeros(len(self.universe))
            if term in self.postings:
                rows, tfs = self.postings[term]
                col[rows] = tfs
            if len(self._dense) > 4096:
                self._dense.clear()
            self._dense[term] = col
        return col

    def scores(self, ep: Compact) -> np.ndarray:
        if self.postings is None:
            self._build()
        rows = ep.rows.astype(np.int64)
        neg = rows < 0
        safe = np.where(neg, 0, rows)
        extra_tokens = [self.tokens(t) for t in ep.extras]
        extra_counts = [Counter(t) for t in extra_tokens]
        dl = self.lengths[safe]
        if neg.any():
            dl[neg] = np.asarray([len(t) for t in extra_tokens], dtype=np.float64)[-rows[neg] - 1]
        n = rows.shape[0]
        avgdl = float(dl.mean()) if n else 1.0
        norm = self.k1 * (1 - self.b + self.b * dl / max(avgdl, 1e-9))
        out = np.zeros(n)
        for term in self.tokens(ep.question):  # repeated query terms count again, as in bm25s
            tf = self._column(term)[safe]
            if neg.any():
                tf[neg] = np.asarray([c.get(term, 0) for c in extra_counts], dtype=np.float64)[-rows[neg] - 1]
            df = int(np.count_nonzero(tf))
            if df == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            out += idf * tf / (tf + norm)
        return out

    def top(self, ep: Compact, k: int) -> list[int]:
        s = self.scores(ep)
        k = min(k, s.shape[0])
        part = np.argpartition(-s, k - 1)[:k]
        return [int(i) for i in part[np.argsort(-s[part], kind="stable")]]


# ---------------------------------------------------------------------------------------- metrics
def mean(xs: Sequence[float]) -> float | None:
    return float(statistics.fmean(xs)) if xs else None


def percentile(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


# ---------------------------------------------------------------------------------------- the run
@dataclass
class Run:
    args: argparse.Namespace
    started: float = field(default_factory=time.perf_counter)
    result: dict[str, Any] = field(default_factory=dict)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def out_of_time(self) -> bool:
        return self.args.time_budget is not None and self.elapsed() > self.args.time_budget

    def save(self) -> None:
        self.result["meta"]["elapsed_s"] = round(self.elapsed(), 2)
        self.result["meta"]["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        path = Path(self.args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.result, indent=1), encoding="utf-8")
        tmp.replace(path)


class GpuMemory:
    """Peak allocated GPU memory per phase and overall (None on CPU)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda, self.overall = cuda, 0

    def reset(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            self.overall = max(self.overall, torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int | None:
        import torch

        if not self.cuda:
            return None
        p = int(torch.cuda.max_memory_allocated())
        self.overall = max(self.overall, p)
        return p


def sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def matmul_tflops(device: Any) -> float | None:
    """bf16 8192³ matrix products, mean of 10 after 3 warm-ups: the GPU's measured dense bf16 throughput."""
    import torch

    if device.type != "cuda":
        return None
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * 10 / (time.perf_counter() - t) / 1e12


def spec_tflops(name: str | None) -> float | None:
    if not name:
        return None
    for frag, value in SPEC_BF16_TFLOPS.items():  # longer fragments (PCIe, NVL) come first
        if frag in name:
            return value
    return None


def flops_per_chunk(model: Any, texts: Sequence[str], sample: int = 4096) -> dict[str, float]:
    """Estimated forward FLOPs of the chunk tower per chunk on a random sample of the chunks."""
    import torch

    base = model._base_encoder(model.chunk_tower)
    params = sum(p.numel() for n, p in base.named_parameters() if not n.startswith(("embeddings.", "pooler.")))
    rng = random.Random(0)
    idx = rng.sample(range(len(texts)), min(sample, len(texts)))
    mask = model.tokenize_chunks([texts[i] for i in idx])["attention_mask"]
    tokens = mask.sum(dim=1).double()
    cfg = base.config
    layers, hidden = int(cfg.num_hidden_layers), int(cfg.hidden_size)
    # 2·params per token for the dense layers; QKᵀ and AV add 2·2·T²·hidden per layer.
    per_chunk = 2 * params * tokens + 4 * layers * hidden * tokens.pow(2)
    return {"tokens_mean": float(tokens.mean()), "tokens_max": float(tokens.max()),
            "nonembedding_params": float(params), "flops_per_chunk_est": float(torch.mean(per_chunk))}


def load_models(args: argparse.Namespace, device: Any) -> tuple[Any, Any]:
    from qrag.training.search import load_model

    qnet = load_model(args.model)
    if args.merge_lora:
        for tower in (qnet.state_tower, qnet.chunk_tower):
            if hasattr(tower.encoder, "merge_and_unload"):
                try:
                    tower.encoder = tower.encoder.merge_and_unload()
                except Exception as e:  # noqa: BLE001 - an unmerged tower computes the same function, slower
                    print(f"scale_eval: LoRA merge failed ({type(e).__name__}: {e}); using the adapters unmerged")
                    args.merge_lora = False
    qnet = qnet.to(device).eval()
    encoder = args.encoder or qnet.config.encoder
    dense = load_model(encoder, device=device).eval() if "dense" in args.methods else None
    return qnet, dense


def scale_phase(run: Run, bench: str, task: str, length: str, universe: Universe, qnet: Any, qcache: VectorCache,
                amp: Any, cuda: bool, mem: GpuMemory, sources: Sequence[str]) -> dict[str, Any]:
    """Index one haystack from scratch (throughput) and time 1…H-hop queries on it (latency, QPS)."""
    import torch

    from qrag.training.index import ChunkIndex
    from qrag.training.search import MultiHopSearcher, SearchConfig

    a = run.args
    t = time.perf_counter()
    ep = next(e for i in range(10_000) if (e := make_episode(bench, task, length, a.split, a.seed, i, sources)))
    gen_s = time.perf_counter() - t
    texts = list(ep.chunks)
    with amp():  # warm-up: kernels, allocator, tokenizer
        qnet.embed_chunks(texts[: min(len(texts), 4 * a.encode_batch)], batch_size=a.encode_batch)
    mem.reset()
    sync(cuda)
    t = time.perf_counter()
    with amp():
        index = ChunkIndex.from_texts(qnet, texts, batch_size=a.encode_batch, show_progress=False, ordered=True)
    sync(cuda)
    index_s = time.perf_counter() - t
    index_peak = mem.peak()
    qcache.seed(compact(ep, universe).rows, index.vectors)
    est = flops_per_chunk(qnet, texts)
    rate = len(texts) / index_s
    achieved = rate * est["flops_per_chunk_est"] / 1e12
    gpu = run.result["gpu"]
    entry: dict[str, Any] = {
        "length": length, "task": task, "episode": ep.id, "chunks": len(texts),
        "num_tokens": ep.metadata.get("num_tokens"), "generate_s": round(gen_s, 3),
        "index_seconds": round(index_s, 3), "chunks_per_s": round(rate, 1), **{k: round(v, 2) for k, v in est.items()},
        "achieved_tflops_est": round(achieved, 3),
        "fraction_of_spec_peak_est": round(achieved / gpu["spec_bf16_tflops"], 5) if gpu.get("spec_bf16_tflops") else None,
        "fraction_of_measured_matmul_est": (round(achieved / gpu["measured_matmul_bf16_tflops"], 5)
                                            if gpu.get("measured_matmul_bf16_tflops") else None),
        "index_peak_memory_bytes": index_peak, "latency": [],
    }
    questions = [make_question(bench, task, a.split, a.seed, i, sources) for i in range(max(a.latency_queries, a.qps_batch))]
    mem.reset()
    for hops in a.hops:
        searcher = MultiHopSearcher(qnet, index, SearchConfig(k=hops, max_hops=hops, stop_threshold=None,
                                                              batch_size=a.qps_batch))
        with amp():
            for q in questions[:2]:
                searcher.search_one(q)
            single = []
            for q in questions[: a.latency_queries]:
                sync(cuda)
                t = time.perf_counter()
                searcher.search_one(q)
                sync(cuda)
                single.append(time.perf_counter() - t)
            batch = questions[: a.qps_batch]
            searcher.search(batch)
            sync(cuda)
            t = time.perf_counter()
            searcher.search(batch)
            sync(cuda)
            batch_s = time.perf_counter() - t
        entry["latency"].append({
            "hops": hops, "queries": len(single), "single_ms_p50": round(1e3 * (percentile(single, 0.5) or 0), 3),
            "single_ms_p90": round(1e3 * (percentile(single, 0.9) or 0), 3),
            "single_ms_mean": round(1e3 * (mean(single) or 0), 3), "batch": len(batch),
            "batch_seconds": round(batch_s, 4), "qps_batched": round(len(batch) / batch_s, 2),
            "qps_single": round(1 / (mean(single) or math.inf), 2),
        })
        if run.out_of_time():
            entry["partial"] = True
            break
    entry["latency_peak_memory_bytes"] = mem.peak()
    last = entry["latency"][-1] if entry["latency"] else None
    if last is not None:
        entry["index_plus_max_hop_p50_s"] = round(index_s + last["single_ms_p50"] / 1e3, 3)
    del index
    if cuda:
        torch.cuda.empty_cache()
    return entry


def make_question(bench: str, task: str, split: str, seed: int, i: int, sources: Sequence[str]) -> str:
    if bench == "babilong":
        return str(babi_sample(task, split, seed, i).question)
    return str(make_episode(bench, task, "4k", split, seed, i, sources).question)


def run_cell(run: Run, bench: str, task: str, length: str, episodes: Iterable[Compact | None], n: int, universe: Universe,
             qnet: Any, dense: Any, qcache: VectorCache, dcache: VectorCache | None, bm25: BM25 | None, amp: Any,
             cuda: bool, mem: GpuMemory) -> dict[str, Any]:
    import torch

    from qrag.eval.metrics import fact_scores
    from qrag.training import hops
    from qrag.training.search import SearchConfig, search_corpora

    a = run.args
    mem.reset()
    cell: dict[str, Any] = {"task": task, "length": length, "tokens_nominal": length_tokens(length),
                            "samples_requested": n, "samples_done": 0, "samples_skipped": 0, "partial": False,
                            "records": []}
    per: dict[str, list[dict[str, float]]] = {m: [] for m in a.methods}
    secs: dict[str, list[float]] = {m: [] for m in a.methods}
    hops_taken: dict[str, list[float]] = {m: [] for m in a.methods}
    timing = Counter[str]()
    for ep in episodes:
        if ep is None:  # the library skips this sample at this length (more facts than sentences)
            cell["samples_skipped"] += 1
            continue
        timing["generate_s"] += ep.seconds
        rec: dict[str, Any] = {"id": ep.id, "num_chunks": ep.num_chunks, "num_tokens": ep.metadata.get("num_tokens"),
                               "supporting": list(ep.supporting)}
        k = max(1, len(ep.supporting))
        texts = Texts(ep, universe)
        t = time.perf_counter()
        corpus = hops.Corpora.shared(qcache.vectors(ep).float(), texts, 1)  # one haystack, in reading order
        sync(cuda)
        timing["qrag_vectors_s"] += time.perf_counter() - t
        for m in a.methods:
            t = time.perf_counter()
            q_values: list[float] = []
            if m in ("qrag", "qrag+stop"):
                cfg = (SearchConfig(k=k, max_hops=a.max_hops, stop_threshold=None) if m == "qrag" else
                       SearchConfig(k=None, max_hops=a.max_hops, stop_threshold=a.stop_threshold))
                with amp():
                    res = search_corpora(qnet, [ep.question], corpus, [functools.partial(row_chunk, texts)], cfg)[0]
                rows = [int(h.chunk.position) for h in res.hits]  # type: ignore[arg-type]
                q_values = [round(h.q_value, 4) for h in res.hits]
                hops_taken[m].append(float(min(len(res.hits), a.max_hops)))
            elif m == "dense":
                assert dense is not None and dcache is not None
                t0 = time.perf_counter()
                dvec = dcache.vectors(ep)
                sync(cuda)
                timing["dense_vectors_s"] += time.perf_counter() - t0
                t = time.perf_counter()
                with amp(), torch.no_grad():
                    state = hops.encode_states(dense, [ep.question], [[]])  # (1, D)
                    scores, _ = hops.q_values(dense, state, hops.Corpora.shared(dvec.float(), texts, 1), [0], [[]])
                    rows = scores[0].topk(min(k, ep.num_chunks)).indices.tolist()
                hops_taken[m].append(0.0)
            else:
                assert bm25 is not None
                rows = bm25.top(ep, k)
                hops_taken[m].append(0.0)
            sync(cuda)
            secs[m].append(time.perf_counter() - t)
            per[m].append(fact_scores(rows, ep.supporting))
            rec[m] = rows if not q_values else {"rows": rows, "q": q_values}
            rec.setdefault("em", {})[m] = per[m][-1]["fact_em"]
        cell["records"].append(rec)
        cell["samples_done"] += 1
        del corpus
        if run.out_of_time() and cell["samples_done"] + cell["samples_skipped"] < n:
            cell["partial"] = True
            break
    done = cell["records"]
    cell["num_chunks_mean"] = mean([r["num_chunks"] for r in done])
    toks = [r["num_tokens"] for r in done if r["num_tokens"] is not None]
    cell["num_tokens_mean"] = mean(toks)
    cell["seconds"] = {k_: round(v, 3) for k_, v in timing.items()}
    cell["methods"] = {
        m: {**{key: mean([x[key] for x in per[m]]) for key in ("fact_em", "fact_recall", "fact_precision", "fact_f1")},
            "hops_mean": mean(hops_taken[m]), "seconds_per_query": mean(secs[m]), "n": len(per[m])}
        for m in a.methods
    }
    cell["peak_memory_bytes"] = mem.peak()
    return cell


def drift_checks(cells: list[dict[str, Any]], methods: Sequence[str], tol: float) -> dict[str, Any]:
    """Fact EM at the longest length against the shortest, per task, for the qrag methods."""
    out: dict[str, Any] = {}
    lengths = sorted({c["length"] for c in cells if c["samples_done"]}, key=length_tokens)
    if len(lengths) < 2:
        return out
    short, long_ = lengths[0], lengths[-1]
    for m in (m for m in methods if m.startswith("qrag")):
        per_task: dict[str, Any] = {}
        for task in dict.fromkeys(c["task"] for c in cells):
            a = next((c for c in cells if c["task"] == task and c["length"] == short and c["samples_done"]), None)
            b = next((c for c in cells if c["task"] == task and c["length"] == long_ and c["samples_done"]), None)
            if a is None or b is None:
                continue
            ea, eb = a["methods"][m]["fact_em"], b["methods"][m]["fact_em"]
            # Sample i holds the same bAbI story / needles at every length (ids carry no length): pair them.
            short_em = {r["id"]: r["em"][m] for r in a["records"]}
            pairs = [(short_em[r["id"]], r["em"][m]) for r in b["records"] if r["id"] in short_em]
            per_task[task] = {"em_short": ea, "em_long": eb, "diff": round(eb - ea, 4), "within": abs(eb - ea) <= tol,
                              "n_short": a["samples_done"], "n_long": b["samples_done"], "paired": len(pairs),
                              "paired_em_short": mean([x for x, _ in pairs]), "paired_em_long": mean([y for _, y in pairs]),
                              "lost_at_long": sum(x > y for x, y in pairs), "gained_at_long": sum(y > x for x, y in pairs)}
        out[m] = {"short": short, "long": long_, "tolerance": tol, "tasks": per_task,
                  "all_within": bool(per_task) and all(v["within"] for v in per_task.values())}
    return out


def table(result: dict[str, Any]) -> str:
    """Markdown tables: accuracy per (task, length), then indexing and latency."""
    methods = result["meta"]["methods"]
    lines = ["| task | length | chunks | tokens | n | " + " | ".join(f"{m} EM/recall" for m in methods) + " |",
             "|---|---|---|---|---|" + "---|" * len(methods)]
    for c in result["cells"]:
        if not c["samples_done"]:
            continue
        vals = []
        for m in methods:
            s = c["methods"][m]
            vals.append(f"{s['fact_em']:.3f}/{s['fact_recall']:.3f}" if s["fact_em"] is not None else "–")
        lines.append(f"| {c['task']} | {c['length']} | {c['num_chunks_mean']:.0f} | {c['num_tokens_mean'] or 0:.0f} | "
                     f"{c['samples_done']}{'*' if c['partial'] else ''} | " + " | ".join(vals) + " |")
    if result["scale"]:
        lines += ["", "| length | chunks | index s | chunks/s | tokens/chunk | est. TFLOP/s | est. of spec peak | "
                  "est. of measured matmul | peak mem (GiB) |", "|---|---|---|---|---|---|---|---|---|"]
        for s in result["scale"]:
            gib = (s["index_peak_memory_bytes"] or 0) / 2**30
            frac = s["fraction_of_spec_peak_est"]
            fm = s["fraction_of_measured_matmul_est"]
            lines.append(f"| {s['length']} | {s['chunks']} | {s['index_seconds']:.2f} | {s['chunks_per_s']:.0f} | "
                         f"{s['tokens_mean']:.1f} | {s['achieved_tflops_est']:.1f} | "
                         f"{'–' if frac is None else f'{100 * frac:.1f}%'} | {'–' if fm is None else f'{100 * fm:.1f}%'} | "
                         f"{gib:.2f} |")
        lines += ["", "| length | hops | latency p50 ms | p90 ms | QPS (single) | QPS (batch of B) | B |",
                  "|---|---|---|---|---|---|---|"]
        for s in result["scale"]:
            for lat in s["latency"]:
                lines.append(f"| {s['length']} | {lat['hops']} | {lat['single_ms_p50']:.1f} | {lat['single_ms_p90']:.1f} | "
                             f"{lat['qps_single']:.1f} | {lat['qps_batched']:.1f} | {lat['batch']} |")
    return "\n".join(lines)


def parse_hops(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", choices=("babilong", "ruler"), default="babilong")
    ap.add_argument("--model", required=True, help="trained checkpoint folder (e.g. runs/gpu/qa15/best) or a shipped qrag/NAME")
    ap.add_argument("--encoder", default=None, help="base encoder of the dense baseline (default: the checkpoint's)")
    ap.add_argument("--tasks", default=None, help="comma-separated (default: every task of the benchmark)")
    ap.add_argument("--lengths", default="32k,10m,1m,128k", help="token lengths, run in this order")
    ap.add_argument("--samples", type=int, default=100, help="samples per (task, length)")
    ap.add_argument("--samples-at", default="", help="per-length overrides, e.g. '10m=50,1m=100'")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--max-hops", type=int, default=None, help="qrag hops (default: 6 babilong, 5 ruler)")
    ap.add_argument("--stop-threshold", type=float, default=0.5)
    ap.add_argument("--hops", default="1-6", help="hop counts timed at --latency-lengths")
    ap.add_argument("--latency-lengths", default="", help="lengths where indexing and hop latency are measured")
    ap.add_argument("--latency-queries", type=int, default=20)
    ap.add_argument("--qps-batch", type=int, default=64)
    ap.add_argument("--split", default="test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sources", default=None, help="text sources (default: the benchmark's)")
    ap.add_argument("--text-pack", default=None, help="text pack to read the text sources from (default: $QRAG_TEXT_PACK; none: the asset packages)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                    help="bf16 autocast for the encoders (default: on for CUDA)")
    ap.add_argument("--merge-lora", action=argparse.BooleanOptionalAction, default=True,
                    help="merge LoRA adapters into the towers for inference (same function, fewer kernels)")
    ap.add_argument("--encode-batch", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=None, help="episode-generating processes (0: inline)")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds; no new sample starts after this")
    ap.add_argument("--drift-tolerance", type=float, default=0.03)
    ap.add_argument("--commit", default=os.environ.get("QRAG_COMMIT"))
    ap.add_argument("--out", required=True, help="JSON file, rewritten after every cell")
    ap.add_argument("--table", default=None, help="also write the markdown tables here")
    args = ap.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in METHODS]
    if bad:
        ap.error(f"unknown method(s) {bad}; valid: {', '.join(METHODS)}")
    args.hops = parse_hops(args.hops)
    args.lengths = [x.strip().lower() for x in args.lengths.split(",") if x.strip()]
    args.latency_lengths = [x.strip().lower() for x in args.latency_lengths.split(",") if x.strip()]
    args.samples_at = {k.strip().lower(): int(v) for k, v in (p.split("=") for p in args.samples_at.split(",") if p.strip())}
    valid = bench_tasks(args.benchmark)
    args.tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else list(valid)
    if any(t not in valid for t in args.tasks):
        ap.error(f"unknown task(s) for {args.benchmark}; valid: {', '.join(valid)}")
    if args.max_hops is None:
        args.max_hops = DEFAULT_MAX_HOPS[args.benchmark]
    if args.workers is None:
        args.workers = max(0, min(14, (os.cpu_count() or 1) - 2))
    return args


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: Sequence[str] | None = None) -> int:
    global _WORKER_UNIVERSE
    args = parse_args(argv)
    run = Run(args)
    packed = maybe_install_text_pack(args.text_pack)
    sources = bench_sources(args.benchmark, args.sources)
    t = time.perf_counter()
    universe = Universe(sources)
    _WORKER_UNIVERSE = universe
    universe_s = time.perf_counter() - t
    # Workers fork now, before torch touches CUDA, and inherit the text pools and the universe.
    pool = None
    if args.workers > 0:
        import multiprocessing as mp

        pool = mp.get_context("fork").Pool(args.workers)

    import torch

    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    cuda = device.type == "cuda"
    bf16 = cuda if args.bf16 is None else args.bf16

    def amp() -> Any:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    gpu_name = torch.cuda.get_device_name(device) if cuda else None
    run.result = {
        "meta": {"benchmark": args.benchmark, "model": args.model, "encoder": args.encoder, "tasks": args.tasks,
                 "lengths": args.lengths, "samples": args.samples, "samples_at": args.samples_at,
                 "methods": args.methods, "max_hops": args.max_hops, "stop_threshold": args.stop_threshold,
                 "split": args.split, "seed": args.seed, "sources": list(sources), "device": str(device),
                 "bf16_autocast": bf16, "merge_lora": args.merge_lora, "encode_batch": args.encode_batch,
                 "workers": args.workers, "torch": torch.__version__, "python": sys.version.split()[0],
                 "commit": args.commit or git_commit(), "text_pack": packed is not None,
                 "universe_sentences": len(universe), "universe_seconds": round(universe_s, 2),
                 "status": "running", "elapsed_s": 0.0, "peak_rss_mb": None, "time_budget_s": args.time_budget,
                 "haystacks": "library episodes (split/seed per sample); universe sentences embedded once per "
                              "model and gathered per episode; facts/needles embedded per episode"},
        "gpu": {"name": gpu_name, "spec_bf16_tflops": spec_tflops(gpu_name),
                "measured_matmul_bf16_tflops": None, "peak_memory_allocated_bytes": None},
        "scale": [], "cells": [], "checks": {},
    }
    mem = GpuMemory(cuda)
    mm = matmul_tflops(device)
    run.result["gpu"]["measured_matmul_bf16_tflops"] = round(mm, 1) if mm else None
    qnet, dense = load_models(args, device)
    run.result["meta"]["encoder"] = args.encoder or qnet.config.encoder
    run.result["meta"]["merge_lora"] = args.merge_lora  # False if merging failed
    run.result["meta"]["model_config"] = {k: v for k, v in vars(qnet.config).items()}
    qcache = VectorCache(qnet, universe, device, amp, args.encode_batch)
    dcache = VectorCache(dense, universe, device, amp, args.encode_batch) if dense is not None else None
    bm25 = BM25(universe) if "bm25" in args.methods else None
    run.save()
    status = "complete"
    try:
        for length in args.latency_lengths:
            if run.out_of_time():
                status = "partial (time budget)"
                break
            entry = scale_phase(run, args.benchmark, args.tasks[0], length, universe, qnet, qcache, amp, cuda, mem, sources)
            run.result["scale"].append(entry)
            print(f"[{run.elapsed():6.1f}s] index {length}: {entry['chunks']} chunks in {entry['index_seconds']:.2f} s "
                  f"({entry['chunks_per_s']:.0f}/s); {args.hops[-1]} hops p50 "
                  f"{entry['latency'][-1]['single_ms_p50'] if entry['latency'] else float('nan'):.1f} ms", flush=True)
            run.save()
        cells = [(length, task) for length in args.lengths for task in args.tasks]
        jobs = [(args.benchmark, task, length, args.split, args.seed, i, sources)
                for length, task in cells for i in range(args.samples_at.get(length, args.samples))]
        stream = pool.imap(_generate, jobs, chunksize=1) if pool is not None else map(_generate, jobs)
        for length, task in cells:
            n = args.samples_at.get(length, args.samples)
            if run.out_of_time():
                status = "partial (time budget)"
                break
            # A cell stopped by the time budget ends the run, so the stream never needs re-aligning.
            cell = run_cell(run, args.benchmark, task, length, islice(stream, n), n, universe, qnet, dense, qcache,
                            dcache, bm25, amp, cuda, mem)
            run.result["cells"].append(cell)
            s = cell["methods"]
            print(f"[{run.elapsed():6.1f}s] {task} {length}: n={cell['samples_done']} "
                  + " ".join(f"{m} {s[m]['fact_em']:.3f}" for m in args.methods if s[m]["fact_em"] is not None), flush=True)
            run.result["checks"]["drift"] = drift_checks(run.result["cells"], args.methods, args.drift_tolerance)
            run.save()
            if cell["partial"]:
                status = "partial (time budget)"
                break
    finally:
        if pool is not None:
            pool.terminate()
    scale = run.result["scale"]
    if scale:
        big = max(scale, key=lambda s: s["chunks"])
        six = next((lat for lat in big["latency"] if lat["hops"] == max(args.hops)), None)
        run.result["checks"]["latency"] = {
            "length": big["length"], "chunks": big["chunks"], "hops": max(args.hops),
            "single_query_p50_s": six["single_ms_p50"] / 1e3 if six else None,
            "index_seconds": big["index_seconds"],
            "index_plus_query_s": big.get("index_plus_max_hop_p50_s"),
            "query_under_1s": bool(six and six["single_ms_p50"] < 1000),
        }
    run.result["checks"]["drift"] = drift_checks(run.result["cells"], args.methods, args.drift_tolerance)
    run.result["gpu"]["peak_memory_allocated_bytes"] = max(mem.overall, mem.peak() or 0) if cuda else None
    run.result["meta"]["status"] = status
    run.result["meta"]["vectors_embedded"] = {"qrag": qcache.embedded, "dense": dcache.embedded if dcache else None}
    run.result["table"] = table(run.result)
    run.save()
    print(run.result["table"])
    print(json.dumps(run.result["checks"], indent=1))
    if args.table:
        Path(args.table).write_text(run.result["table"] + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
