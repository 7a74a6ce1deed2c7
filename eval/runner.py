"""Run a benchmark sweep (tasks × lengths × methods), one JSON line per (sample, method), resumable.

Results go to `OUT/results.jsonl`, appended and flushed after every sample, so an interrupted sweep keeps
what it finished and a rerun with the same settings skips it (the key is benchmark|task|length|method|id).
Every record carries the settings that shape it (`SHAPING` and the checkpoint's fingerprint); a rerun into
the same folder with other settings is refused before any work, so old records never pose as new ones.
After the sweep the summary, table and plot are written next to it (`qrag.eval.report`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from qrag.eval import metrics
from qrag.eval.baselines import (
    ADAPTIVE,
    BASELINES,
    FLOORS,
    NEEDS_CHECKPOINT,
    Retrieval,
    Retriever,
    make_retrievers,
)
from qrag.eval.reader import Reader, build_prompt, load_reader
from qrag.eval.report import summarize, write_drift, write_margins, write_paired, write_recall, write_reports
from qrag.eval.speed import speed_model, speed_phase
from qrag.eval.sweep import BENCHMARKS, RunConfig, cell_episodes, iter_cells
from qrag.training.data import Episode
from qrag.training.model.folder import CONFIG_FILE, WEIGHTS_FILE
from qrag.training.model.shipped import resolve_checkpoint
from qrag.training.model.towers import precision_autocast
from qrag.training.search.chunk_vectors import ChunkVectorFolder

RESULTS_FILE = "results.jsonl"
RECALL_KS = (2, 4, 8)
"""recall@k recorded whenever a method returned at least k chunks (run with --budget 8 for all three); a benchmark
may name its own (`Benchmark.recall_ks`: hotpotqa_pool's 2, 5, 10, with --budget 10)."""
FACT_EM_FILE = "fact_em_at_2"
"""hotpotqa_pool: fact EM of each method's first two chunks (both gold passages), paired against the reference."""
SHAPING = ("model", "encoder", "budget", "max_hops", "stop_threshold", "fill", "lexical_weight", "seed", "reader",
           "max_new_tokens", "data", "corpus", "distractors", "precision", "filler_sentences", "split", "background")
"""RunConfig fields that shape a record: every record carries them (and the model's fingerprint), and a sweep
resumed into the same folder must have the same values."""
SHAPING_BEFORE = {"precision": "fp32", "filler_sentences": None, "fill": "model", "lexical_weight": "model",
                  "corpus": None, "split": "test", "background": None}
"""Values of SHAPING fields added later, for records written before them."""
NOT_SETTINGS = ("out", "progress", "lengths_resolved", "device", "chunk_vectors", "speed_lengths", "speed_hops",
                "speed_queries")
"""RunConfig fields that say where and how a sweep runs, not what it measures (left out of summary.json)."""
MAX_GROUP_CHUNKS = 1 << 21
"""Most chunks in one group of questions retrieved together (2M: 3 GiB of fp32 384-d vectors): at 1M–10M
tokens a group shrinks to fit, down to one question."""


def sample_key(benchmark: str, task: str | None, length: str, method: str, episode_id: str) -> str:
    return f"{benchmark}|{task or '-'}|{length}|{method}|{episode_id}"


def read_results(path: Path) -> list[dict[str, Any]]:
    """The records of a results file; a torn last line (a killed run) is skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def score_answer(benchmark: str, episode: Episode, output: str) -> dict[str, float]:
    """Answer metrics for one reader output; 'accuracy' is the benchmark's headline answer score."""
    task = str(episode.metadata.get("task", ""))
    answer = episode.answer or ""
    source = BENCHMARKS[benchmark].source
    if source == "babilong":
        return {"accuracy": float(metrics.babilong_correct(output, answer, episode.question, task))}
    answers = [str(a) for a in episode.metadata.get("answers", [])] or [answer]
    if source == "ruler_niah":
        return {"accuracy": metrics.ruler_fraction(output, answers)}
    if source == "ruler_qa":
        return {"accuracy": metrics.ruler_any_match(output, answers)}
    scores = metrics.qa_scores(output, answers)
    return {"accuracy": scores["answer_em"], **scores}


def _record(cfg: RunConfig, task: str | None, length: str, ep: Episode, method: str, r: Retrieval) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "key": sample_key(cfg.benchmark, task, length, method, ep.id),
        "benchmark": cfg.benchmark, "task": task or "-", "length": length, "method": method, "id": ep.id,
        "num_chunks": ep.num_chunks, "num_tokens": ep.metadata.get("num_tokens"),
        "supporting": list(ep.supporting), "retrieved": r.indices, "q_values": r.q_values,
        "num_retrieved": len(r.indices), "hops": r.hops,
        "encoder_calls": r.encoder_calls, "retrieval_s": r.seconds, "index_s": r.index_s,
        "chunks_embedded": r.chunks_embedded,
    }
    if ep.supporting:
        rec.update(metrics.fact_scores(r.indices, ep.supporting))
        rec["recall_at_1"] = metrics.recall_at_k(r.indices, ep.supporting, 1) if r.indices else 0.0
        # Fact EM of the first |SF| chunks: for a greedy method run at a larger budget, its |SF|-budget fact EM.
        sf = len(ep.supporting)
        rec["fact_em_at_sf"] = float(set(ep.supporting) <= set(r.indices[:sf]))
        # Greedy rankings: the first k of a budget-8 retrieval are the budget-k retrieval. An adaptive method's
        # recall@k counts what it kept among its first k, however few (a user with k as the cap gets that).
        for k in BENCHMARKS[cfg.benchmark].recall_ks:
            if len(r.indices) >= k or len(r.indices) == ep.num_chunks or method in ADAPTIVE:
                rec[f"recall_at_{k}"] = metrics.recall_at_k(r.indices, ep.supporting, k)
    return rec


def run(cfg: RunConfig, *, retrievers: Sequence[Retriever] | None = None, reader: Reader | None = None,
        stop_after: int | None = None) -> dict[str, Any]:
    """Run the sweep, append per-sample results, and write the reports.

    Args:
        cfg: The sweep.
        retrievers: Prebuilt retrievers (default: built from `cfg`; `cfg.chunk_vectors` applies to those only).
        reader: A prebuilt reader (default: loaded from `cfg.reader` when set).
        stop_after: Stop after this many new records (tests use it to simulate an interrupted sweep).

    Returns:
        The summary (also written to `OUT/summary.json`).

    Raises:
        ValueError: bad names or paths (before anything is written).
        ReaderLoadError: the reader cannot be loaded (records already in the results file are kept).
    """
    cfg.validate()
    for r in retrievers or ():  # records carry cfg's budget: a prebuilt retriever must retrieve that many
        if getattr(r, "budget", cfg.budget) != cfg.budget:
            raise ValueError(f"retriever {r.name!r} has budget {getattr(r, 'budget', None)!r} but the sweep records "
                             f"budget {cfg.budget!r}; build it with the sweep's budget.")
    folder = ChunkVectorFolder(cfg.chunk_vectors) if cfg.chunk_vectors is not None and retrievers is None else None
    settings = record_settings(cfg)
    path = cfg.out / RESULTS_FILE
    done = {rec["key"] for rec in check_resumable(path, settings)}
    cfg.out.mkdir(parents=True, exist_ok=True)
    if retrievers is None:
        retrievers = make_retrievers(cfg.methods, encoder=cfg.encoder, checkpoint=cfg.model, budget=cfg.budget,
                                     max_hops=cfg.max_hops, stop_threshold=cfg.stop_threshold,
                                     fill=cfg.fill, lexical_weight=cfg.lexical_weight, device=cfg.device,
                                     chunk_vectors=folder)
    if reader is None and cfg.reader is not None:
        reader = load_reader(cfg.reader, max_new_tokens=cfg.max_new_tokens, device=cfg.device)
    device = torch.device(cfg.device or "cpu")
    if cfg.speed_lengths:
        speed_phase(cfg, speed_model(cfg, retrievers), device)
    new = 0
    with _saved_on_exit(folder), path.open("a", encoding="utf-8") as fh:
        for task, label, value in iter_cells(cfg):
            episodes = cell_episodes(cfg, task, value, cfg.samples(label))
            desc = f"{cfg.benchmark} {task or ''} {label}".strip()
            bar = tqdm(total=len(episodes), desc=desc, disable=not cfg.progress, unit="q")
            for group in question_groups(episodes, cfg.batch_size):
                for retriever in retrievers:
                    todo = [ep for ep in group
                            if sample_key(cfg.benchmark, task, label, retriever.name, ep.id) not in done]
                    if not todo:
                        continue
                    with precision_autocast(device, cfg.precision):
                        retrieved = retriever.retrieve(todo)
                    for ep, r in zip(todo, retrieved, strict=True):
                        start_read = time.perf_counter()
                        rec = {**_record(cfg, task, label, ep, retriever.name, r), "settings": settings}
                        if reader is not None:
                            # The reader sees the retrieved chunks in document order, whatever order they came in.
                            context = [ep.chunks[i] for i in sorted(set(r.indices))]
                            prompt = build_prompt(BENCHMARKS[cfg.benchmark].source, task, ep.question, context)
                            output = reader.generate([prompt])[0]
                            rec.update({"output": output, "answer": ep.answer,
                                        **score_answer(cfg.benchmark, ep, output)})
                        rec["latency_s"] = r.seconds + time.perf_counter() - start_read
                        fh.write(json.dumps(rec) + "\n")
                        fh.flush()
                        done.add(rec["key"])
                        new += 1
                        if stop_after is not None and new >= stop_after:
                            bar.close()
                            return _finish(cfg, path)
                bar.update(len(group))
            bar.close()
    return _finish(cfg, path)


def question_groups(episodes: Sequence[Episode], size: int, max_chunks: int = MAX_GROUP_CHUNKS) -> Iterator[list[Episode]]:
    """Consecutive groups of at most `size` episodes holding at most `max_chunks` chunks together (an episode
    larger than that alone is a group of one)."""
    group: list[Episode] = []
    chunks = 0
    for ep in episodes:
        if group and (len(group) == size or chunks + ep.num_chunks > max_chunks):
            yield group
            group, chunks = [], 0
        group.append(ep)
        chunks += ep.num_chunks
    if group:
        yield group


def peak_memory_mb() -> dict[str, float | None]:
    """This process's peak resident memory and peak CUDA memory allocated by torch (None where not measured)."""
    try:
        import resource

        rss: float | None = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    except ImportError:  # not on this platform
        rss = None
    cuda = None
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            cuda = torch.cuda.max_memory_allocated() / 2**20
    except ImportError:
        pass
    return {"rss": rss, "cuda": cuda}


def machine(device: str | None) -> dict[str, Any]:
    """Where the sweep ran: the torch device and its GPU name, torch, Python, the CPU count and platform."""
    dev = torch.device(device or "cpu")
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" and torch.cuda.is_available() else None
    return {"device": str(dev), "gpu": gpu, "torch": torch.__version__, "python": platform.python_version(),
            "cpus": os.cpu_count(), "threads": torch.get_num_threads(), "platform": platform.platform(terse=True)}


def model_fingerprint(model: str | None) -> str | None:
    """A digest of a checkpoint's header and weights (None without a checkpoint or when it cannot be read)."""
    if model is None:
        return None
    folder = resolve_checkpoint(model)
    h = hashlib.sha256()
    try:
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            with (folder / name).open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    except OSError:
        return None  # loading the checkpoint reports the problem
    return h.hexdigest()[:16]


def record_settings(cfg: RunConfig) -> dict[str, Any]:
    """What shapes a record of this sweep: `SHAPING` fields and the checkpoint's fingerprint."""
    return {**{name: getattr(cfg, name) for name in SHAPING}, "model_fingerprint": model_fingerprint(cfg.model)}


def check_resumable(path: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of an existing results file, if they were made with `settings`.

    Raises:
        ValueError: a record was made with other settings (named, with both values) or carries none.
    """
    records = read_results(path)
    for rec in records:
        saved = rec.get("settings")
        if not isinstance(saved, dict):
            raise ValueError(f"{path} was written without its settings (an earlier qrag version), so its records "
                             "cannot be matched to this sweep; use another --out, or delete the file to start over.")
        diff = {k: (saved.get(k, SHAPING_BEFORE.get(k)), v) for k, v in settings.items()
                if saved.get(k, SHAPING_BEFORE.get(k)) != v}
        if settings["model_fingerprint"] is not None and "model_fingerprint" not in diff:
            diff.pop("model", None)  # the same checkpoint reached by another path
        if diff:
            text = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in sorted(diff.items()))
            raise ValueError(f"{path} holds results of other settings ({text}); resume with the same settings, use "
                             "another --out, or delete the file to start over.")
    return records


@contextmanager
def _saved_on_exit(folder: ChunkVectorFolder | None) -> Iterator[None]:
    """Write the chunk vectors computed so far when the sweep ends, finished or interrupted."""
    try:
        yield
    finally:
        if folder is not None:
            folder.save()


def _finish(cfg: RunConfig, path: Path) -> dict[str, Any]:
    cells = {(cfg.benchmark, t or "-", lab, m) for t, lab, _ in iter_cells(cfg) for m in cfg.methods}
    records = [r for r in read_results(path) if (r["benchmark"], r["task"], r["length"], r["method"]) in cells]
    settings = {k: v for k, v in asdict(cfg).items() if k not in NOT_SETTINGS}
    summary = {**summarize(records, settings), "peak_memory_mb": peak_memory_mb(), "machine": machine(cfg.device)}
    write_reports(summary, cfg.out)
    trained = [m for m in cfg.methods if m in NEEDS_CHECKPOINT]
    baselines = [m for m in cfg.methods if m in BASELINES]
    if trained and baselines:
        write_margins(records, trained, baselines, cfg.out)
    # Paired against each single-shot floor of the sweep, the first present in recall.md, and against the model a
    # fine-tune started from: the others in recall_vs_NAME.md (the same for hotpotqa_pool's fact EM@2: both gold
    # passages in the top 2).
    for i, reference in enumerate(m for m in (*FLOORS, "init") if m in cfg.methods):
        suffix = "" if i == 0 else f"_vs_{reference}"
        if any("recall_at_2" in r for r in records):
            write_recall(records, cfg.methods, cfg.out, BENCHMARKS[cfg.benchmark].recall_ks, reference, suffix)
        if BENCHMARKS[cfg.benchmark].source == "hotpotqa_pool":
            write_paired(records, cfg.methods, "fact_em_at_sf", cfg.out, FACT_EM_FILE + suffix, reference)
    if len(cfg.lengths_resolved) > 1:
        by_length = sorted(cfg.lengths_resolved, key=lambda label_value: label_value[1] or 0)
        write_drift(records, cfg.methods, [label for label, _ in by_length], cfg.out)
    return summary
