"""Indexing throughput and per-hop latency on one haystack: the speed half of a `qrag-eval` sweep at scale.

`qrag-eval ... --speed-lengths 1m,10m` measures, at each of those lengths and before the sweep's cells, one
haystack (sample 0 of the sweep's first task):

- **indexing**: `ChunkIndex.from_texts` from scratch (tokenisation included, no cache), in chunks per second;
  on a GPU also an *estimate* of the fraction of the GPU's bf16 peak it reaches: forward FLOPs per chunk ≈
  2 × non-embedding parameters × real tokens + attention (4 × layers × hidden × tokens²), against the vendor's
  dense bf16 peak and against a bf16 matrix product timed in the same run;
- **hops**: for each hop count h, a `MultiHopSearcher` that takes exactly h hops (no stop rule) over that
  index: single-question latency (p50 / p90 over `queries` questions after two warm-ups) and the questions
  per second of one batch of `batch` questions (after a warm-up batch).

GPU work is synchronised before every clock read. Results go to `OUT/speed.json` and `OUT/speed.md`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qrag.eval.baselines import NEEDS_CHECKPOINT, Retriever
from qrag.eval.sweep import BENCHMARKS, RunConfig, cell_episodes, parse_length
from qrag.training.atomic import write_text_atomic
from qrag.training.model.qnet import QNetwork
from qrag.training.model.towers import precision_autocast
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, load_model

SPEED_FILE = "speed.json"
SPEED_TABLE = "speed.md"
SPEC_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "H800": 989.4,
                    "A100": 312.0, "L40S": 362.0, "L4": 121.0}
"""Dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets, by GPU name fragment; longer
fragments come first so 'H100 PCIe' is not read as 'H100'."""


def spec_bf16_tflops(gpu_name: str | None) -> float | None:
    """The data-sheet dense bf16 peak of a GPU by its name (None when unknown)."""
    for fragment, tflops in SPEC_BF16_TFLOPS.items():
        if gpu_name and fragment in gpu_name:
            return tflops
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(device: torch.device, n: int = 8192, repeats: int = 10) -> float | None:
    """Measured dense bf16 throughput: n³ matrix products, mean of `repeats` after 3 warm-ups (CUDA only)."""
    if device.type != "cuda":
        return None
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _sync(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12


def chunk_flops(model: QNetwork, texts: Sequence[str], sample: int = 4096, seed: int = 0) -> dict[str, float]:
    """Estimated forward FLOPs of the chunk tower per chunk, on a random sample of `texts`.

    Dense layers cost 2 × non-embedding parameters per real token; attention's QKᵀ and AV add
    2 × 2 × tokens² × hidden per layer. Embedding look-ups and the pooler are left out.
    """
    base = QNetwork.base_encoder(model.chunk_tower)
    params = sum(p.numel() for name, p in base.named_parameters() if not name.startswith(("embeddings.", "pooler.")))
    rows = random.Random(seed).sample(range(len(texts)), min(sample, len(texts)))
    tokens = model.tokenize_chunks([texts[i] for i in rows])["attention_mask"].sum(dim=1).double()  # (S,)
    layers, hidden = int(base.config.num_hidden_layers), int(base.config.hidden_size)
    per_chunk = 2 * params * tokens + 4 * layers * hidden * tokens.pow(2)  # (S,)
    return {"tokens_mean": float(tokens.mean()), "tokens_max": float(tokens.max()),
            "nonembedding_params": float(params), "flops_per_chunk_est": float(per_chunk.mean())}


def _ms(seconds: Sequence[float], q: float) -> float:
    return round(1e3 * float(np.percentile(np.asarray(seconds), q)), 3)


def measure(model: QNetwork, texts: Sequence[str], questions: Sequence[str], hop_counts: Sequence[int], *,
            precision: str = "fp32", queries: int = 20, batch: int = 32, encode_batch: int = 1024,
            gpu: dict[str, Any] | None = None, clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Index `texts` from scratch and time 1…H-hop searches of `questions` over it.

    Args:
        model: The Q-network (its device is where everything runs).
        texts: The haystack's chunks, in reading order.
        questions: At least `max(queries, batch)` questions (cycled when fewer).
        hop_counts: Hop counts to time, each with exactly that many hops.
        precision: The encoders' arithmetic ('fp32', 'bf16', 'fp16'; `precision_autocast`).
        queries: Questions timed one at a time.
        batch: Questions in the timed batch.
        encode_batch: Chunks per encoder batch while indexing.
        gpu: `gpu_info()` of this run (for the fraction-of-peak estimates); None on a CPU.
        clock: Seconds, read before and after each timed span (the indexing, each question, the batch).

    Raises:
        ValueError: no texts or questions, a hop count below 1, or an unknown precision.
    """
    if not texts or not questions:
        raise ValueError("the speed phase needs a haystack and at least one question.")
    if any(h < 1 for h in hop_counts):
        raise ValueError(f"hop counts must be >= 1, got {list(hop_counts)}.")
    device = model.device
    model.eval()
    asked = [questions[i % len(questions)] for i in range(max(queries, batch))]
    with torch.no_grad():
        model.embed_chunks(list(texts[:encode_batch]), batch_size=encode_batch, precision=precision)  # warm-up: one batch
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        start = clock()
        index = ChunkIndex.from_texts(model, texts, batch_size=encode_batch, show_progress=False, ordered=True,
                                      precision=precision)
        _sync(device)
        index_s = clock() - start
    rate = len(texts) / index_s
    est = chunk_flops(model, texts)
    achieved = rate * est["flops_per_chunk_est"] / 1e12
    gpu = gpu or {}
    entry: dict[str, Any] = {
        "chunks": len(texts), "index_s": round(index_s, 4), "chunks_per_s": round(rate, 1),
        **{k: round(v, 2) for k, v in est.items()}, "achieved_tflops_est": round(achieved, 3),
        "fraction_of_spec_peak_est": round(achieved / gpu["spec_bf16_tflops"], 5) if gpu.get("spec_bf16_tflops") else None,
        "fraction_of_measured_matmul_est": (round(achieved / gpu["measured_matmul_bf16_tflops"], 5)
                                            if gpu.get("measured_matmul_bf16_tflops") else None),
        "index_peak_memory_mb": _peak_mb(device), "hops": [],
    }
    with torch.no_grad(), precision_autocast(device, precision):
        for h in hop_counts:
            searcher = MultiHopSearcher(model, index, SearchConfig(k=h, max_hops=h, stop_threshold=None, batch_size=batch))
            for q in asked[:2]:
                searcher.search_one(q)
            single = []
            for q in asked[:queries]:
                _sync(device)
                start = clock()
                searcher.search_one(q)
                _sync(device)
                single.append(clock() - start)
            group = asked[:batch]
            searcher.search(group)
            _sync(device)
            start = clock()
            searcher.search(group)
            _sync(device)
            batch_s = clock() - start
            entry["hops"].append({
                "hops": h, "queries": len(single), "single_ms_p50": _ms(single, 50), "single_ms_p90": _ms(single, 90),
                "batch": len(group), "batch_s": round(batch_s, 4), "qps_batched": round(len(group) / batch_s, 2),
                "qps_single": round(len(single) / sum(single), 2),
            })
    entry["peak_memory_mb"] = _peak_mb(device)
    return entry


def _peak_mb(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None


def gpu_info(device: torch.device) -> dict[str, Any] | None:
    """The GPU's name, its data-sheet bf16 peak and a measured bf16 matrix-product rate (None on a CPU)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    measured = matmul_tflops(device)
    return {"name": name, "spec_bf16_tflops": spec_bf16_tflops(name),
            "measured_matmul_bf16_tflops": None if measured is None else round(measured, 1)}


def speed_table(result: dict[str, Any]) -> str:
    """Markdown: one indexing row per length, then one latency row per (length, hop count)."""
    lines = ["| length | chunks | index s | chunks/s | tokens/chunk | est. TFLOP/s | est. of spec peak | "
             "est. of measured matmul | peak memory MB |", "|---|---|---|---|---|---|---|---|---|"]

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:.1f}%"

    for e in result["lengths"]:
        mem = "–" if e["index_peak_memory_mb"] is None else f"{e['index_peak_memory_mb']:.0f}"
        lines.append(f"| {e['length']} | {e['chunks']} | {e['index_s']:.2f} | {e['chunks_per_s']:.0f} | "
                     f"{e['tokens_mean']:.1f} | {e['achieved_tflops_est']:.2f} | {pct(e['fraction_of_spec_peak_est'])} | "
                     f"{pct(e['fraction_of_measured_matmul_est'])} | {mem} |")
    lines += ["", "| length | hops | latency p50 ms | p90 ms | questions/s (one at a time) | questions/s (batch of B) | B |",
              "|---|---|---|---|---|---|---|"]
    for e in result["lengths"]:
        for h in e["hops"]:
            lines.append(f"| {e['length']} | {h['hops']} | {h['single_ms_p50']:.1f} | {h['single_ms_p90']:.1f} | "
                         f"{h['qps_single']:.1f} | {h['qps_batched']:.1f} | {h['batch']} |")
    return "\n".join(lines) + "\n"


def write_speed(result: dict[str, Any], out: Path) -> None:
    """Write `speed.json` and `speed.md` into `out` (atomically each)."""
    write_text_atomic(out / SPEED_FILE, json.dumps(result, indent=1))
    write_text_atomic(out / SPEED_TABLE, speed_table(result))


def speed_model(cfg: RunConfig, retrievers: Sequence[Retriever]) -> QNetwork:
    """The model the speed phase times: the trained one when the sweep has it, else the untrained baselines'."""
    models = {r.name: model for r in retrievers if isinstance(model := getattr(r, "model", None), QNetwork)}
    for name in (*NEEDS_CHECKPOINT, "multihop", "dense", "cosine"):
        if name in models:
            return models[name]
    return load_model(cfg.model or cfg.encoder, device=cfg.device)


def speed_phase(cfg: RunConfig, model: QNetwork, device: torch.device) -> dict[str, Any]:
    """Index sample 0 of the first task from scratch at each `cfg.speed_lengths` length and time 1…H-hop
    searches on it (`qrag.eval.speed.measure`); writes `speed.json` and `speed.md` after every length."""
    bench = BENCHMARKS[cfg.benchmark]
    task = (cfg.tasks or bench.tasks or (None,))[0]
    lengths = [(label, parse_length(label, bench)) for label in cfg.speed_lengths]
    # Questions from the shortest haystack the sweep names (a question does not depend on the haystack's length).
    shortest = min((value for _, value in [*lengths, *cfg.lengths_resolved]), key=lambda v: v or 0)
    questions = [ep.question for ep in cell_episodes(cfg, task, shortest, max(cfg.speed_queries, cfg.batch_size))]
    horizon = cfg.max_hops or model.hop_settings.max_hops
    hop_counts = list(cfg.speed_hops or range(1, horizon + 1))
    result: dict[str, Any] = {"benchmark": cfg.benchmark, "task": task, "model": cfg.model or cfg.encoder,
                              "device": str(device), "precision": cfg.precision, "torch": torch.__version__,
                              "gpu": gpu_info(device), "lengths": []}
    for label, value in lengths:
        episode = cell_episodes(cfg, task, value, 1)[0]
        entry = measure(model, list(episode.chunks), questions, hop_counts, precision=cfg.precision,
                        queries=cfg.speed_queries, batch=cfg.batch_size, gpu=result["gpu"])
        result["lengths"].append({"length": label, "episode": episode.id,
                                  "num_tokens": episode.metadata.get("num_tokens"), **entry})
        write_speed(result, cfg.out)
    return result
