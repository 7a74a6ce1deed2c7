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
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from qrag.eval import metrics
from qrag.eval.baselines import (
    ADAPTIVE,
    BASELINES,
    METHODS,
    NEEDS_CHECKPOINT,
    Retrieval,
    Retriever,
    make_retrievers,
)
from qrag.eval.reader import Reader, build_prompt, load_reader
from qrag.eval.report import summarize, write_margins, write_recall, write_reports
from qrag.training.chunk_vectors import ChunkVectorFolder
from qrag.training.data import Episode, load_episodes
from qrag.training.persist import CONFIG_FILE, WEIGHTS_FILE
from qrag.training.shipped import resolve_checkpoint
from qrag.training.validate import check_out_path

RESULTS_FILE = "results.jsonl"
RECALL_KS = (2, 4, 8)
"""recall@k recorded whenever a method returned at least k chunks (run with --budget 8 for all three)."""
SHAPING = ("model", "encoder", "budget", "max_hops", "stop_threshold", "seed", "reader", "max_new_tokens", "data",
           "distractors")
"""RunConfig fields that shape a record: every record carries them (and the model's fingerprint), and a sweep
resumed into the same folder must have the same values."""
NOT_SETTINGS = ("out", "progress", "lengths_resolved", "device", "chunk_vectors")
"""RunConfig fields that say where and how a sweep runs, not what it measures (left out of summary.json)."""


@dataclass(frozen=True)
class Benchmark:
    """How a `qrag-eval` benchmark maps to a data source."""

    source: str
    """The `qrag.training.data` source."""
    tasks: tuple[str, ...] | None
    """Valid tasks (None: the source has none)."""
    length_kind: str | None
    """'sentences', 'tokens', or None (fixed-size samples)."""
    default_lengths: tuple[str, ...] = ()
    """Lengths swept when none are given."""
    needs_path: bool = False
    """Whether the data is read from --data PATH."""


BENCHMARKS: dict[str, Benchmark] = {
    "babilong": Benchmark("babilong", ("qa1", "qa2", "qa3", "qa4", "qa5"), "sentences", ("1k", "4k", "32k")),
    "ruler": Benchmark("ruler_niah", ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
                                      "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery"),
                       "tokens", ("4k",)),
    "ruler_qa": Benchmark("ruler_qa", ("qa_1", "qa_2"), "tokens", ("4k",), needs_path=True),
    "hotpotqa": Benchmark("hotpotqa", None, None, needs_path=True),
    "2wiki": Benchmark("2wiki", None, None, needs_path=True),
    "musique": Benchmark("musique", None, None, needs_path=True),
    "jsonl": Benchmark("jsonl", None, None, needs_path=True),
    "wiki": Benchmark("wiki", ("mix", "bridge", "chain", "comparison", "single"), None),
}

BABILONG_SENTENCES = {"0k": 10, "1k": 50, "2k": 100, "4k": 160, "8k": 320, "16k": 600, "32k": 1200,
                      "64k": 2400, "128k": 4600, "1m": 40000, "10m": 400000}
"""qrag's BabiLong lengths in sentences (one chunk = one sentence; BENCHMARKS.md §2)."""


@dataclass
class RunConfig:
    """One `qrag-eval` sweep."""

    benchmark: str
    """A key of `BENCHMARKS`."""
    out: Path
    """Folder for results.jsonl, summary.json, table.md and the plot."""
    methods: tuple[str, ...] = ("bm25", "dense", "multihop", "oracle")
    """Retrievers to compare (names from `qrag.eval.baselines.METHODS`)."""
    tasks: tuple[str, ...] | None = None
    """Tasks to run (None: all of the benchmark's)."""
    lengths: tuple[str, ...] | None = None
    """Context lengths ('1k', '32k', or a plain number of sentences/tokens); None: the defaults."""
    num_samples: int = 100
    """Samples per (task, length)."""
    model: str | None = None
    """A trained Q-RAG checkpoint folder (needed by the qrag methods)."""
    encoder: str = "all-MiniLM-L6-v2"
    """Encoder for the untrained dense baselines."""
    reader: str | None = None
    """Reader LLM ('smollm2', 'vllm:NAME', a transformers folder/name); None: retrieval metrics only."""
    data: str | None = None
    """Data file for file-based benchmarks (hotpotqa, musique, 2wiki, ruler_qa, jsonl)."""
    budget: int | None = None
    """Chunks per question for non-adaptive methods; None: |SF| of each sample."""
    max_hops: int | None = None
    """Most hops for multi-hop methods; None: the trained checkpoint's horizon (saved with it)."""
    stop_threshold: float | None = None
    """Stop-rule threshold for 'qrag+stop'; None: the checkpoint's saved (calibrated) threshold."""
    seed: int = 0
    """Generator seed (split 'test')."""
    distractors: int | None = None
    """`wiki` only: non-gold passages per question, from the test pages (None: the source's default, 30); 1 000
    or more makes each question search all of the test split's pages, a corpus rather than a short list."""
    max_new_tokens: int = 32
    """Reader tokens per answer."""
    device: str | None = None
    """Torch device for encoders and the reader."""
    chunk_vectors: Path | None = None
    """Folder that keeps chunk vectors between runs (`ChunkVectorFolder`); None: embed afresh each run."""
    batch_size: int = 32
    """Questions each retriever handles together (their `retrieval_s` is the batch's time shared equally;
    1 measures single-question latency)."""
    progress: bool = True
    """Show progress bars."""
    lengths_resolved: list[tuple[str, int | None]] = field(default_factory=list, repr=False)

    def validate(self) -> RunConfig:
        """Check names before any work starts; fill `lengths_resolved`.

        Raises:
            ValueError: an unknown benchmark, task, method or length, or a missing data path.
        """
        bench = BENCHMARKS.get(self.benchmark)
        if bench is None:
            raise ValueError(f"unknown benchmark {self.benchmark!r}; valid benchmarks: {', '.join(BENCHMARKS)}.")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"unknown method(s) {bad}; valid methods: {', '.join(METHODS)}.")
        if self.tasks is not None:
            if bench.tasks is None:
                raise ValueError(f"benchmark {self.benchmark!r} has no tasks; drop --tasks.")
            bad = [t for t in self.tasks if t not in bench.tasks]
            if bad:
                raise ValueError(f"unknown task(s) {bad} for {self.benchmark!r}; valid tasks: {', '.join(bench.tasks)}.")
        if bench.needs_path and self.data is None:
            raise ValueError(f"benchmark {self.benchmark!r} reads a file: pass --data PATH.")
        if self.data is not None and not Path(self.data).expanduser().exists():
            raise ValueError(f"data file {self.data!r} does not exist.")
        for name, low in (("num_samples", 1), ("batch_size", 1), ("max_new_tokens", 1), ("budget", 1),
                          ("max_hops", 1), ("seed", 0)):
            value = getattr(self, name)
            if value is None and name in ("budget", "max_hops"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{name} ({flag}) must be an integer >= {low}, got {value!r}.")
        if self.distractors is not None:
            if bench.source != "wiki":
                raise ValueError(f"--distractors applies to the wiki benchmark only, not {self.benchmark!r}.")
            if isinstance(self.distractors, bool) or not isinstance(self.distractors, int) or self.distractors < 0:
                raise ValueError(f"distractors (--distractors) must be an integer >= 0, got {self.distractors!r}.")
        t = self.stop_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)):
            raise ValueError(f"stop_threshold (--stop-threshold) must be a finite number, got {t!r}.")
        check_out_path(self.out, "--out", folder=True)
        self.lengths_resolved = [(lab, _parse_length(lab, bench)) for lab in (self.lengths or bench.default_lengths)]
        if not self.lengths_resolved:
            self.lengths_resolved = [("-", None)]
        return self


def _parse_length(label: str, bench: Benchmark) -> int | None:
    if bench.length_kind is None:
        raise ValueError(f"benchmark source {bench.source!r} has fixed-size samples; drop --lengths.")
    low = label.strip().lower()
    if bench.length_kind == "sentences" and low in BABILONG_SENTENCES:
        return BABILONG_SENTENCES[low]
    mult = {"k": 1024, "m": 1024 * 1024}.get(low[-1:], 1)
    try:
        value = int(float(low[:-1] if mult > 1 else low) * mult)
    except (ValueError, OverflowError):  # OverflowError: 'inf'
        value = 0
    if value < 1:
        raise ValueError(f"bad length {label!r}: use e.g. 1k, 4k, 32k, or a plain number of {bench.length_kind}.")
    return value


def cell_episodes(cfg: RunConfig, task: str | None, length: int | None) -> list[Episode]:
    """The samples of one (task, length) cell of a validated sweep (deterministic: the same every call)."""
    bench = BENCHMARKS[cfg.benchmark]
    kw: dict[str, Any] = {"task": task, "num_samples": cfg.num_samples, "seed": cfg.seed}
    if bench.source in ("babilong", "ruler_niah", "wiki"):
        kw["split"] = "test"
    if cfg.distractors is not None:
        kw["num_distractors"] = cfg.distractors
    if bench.length_kind == "sentences":
        kw["num_sentences"] = length
    elif bench.length_kind == "tokens":
        kw["num_tokens"] = length
    if cfg.data is not None:
        kw["path"] = str(Path(cfg.data).expanduser())
    return load_episodes(bench.source, **kw)


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
        for k in RECALL_KS:
            if len(r.indices) >= k or len(r.indices) == ep.num_chunks or method in ADAPTIVE:
                rec[f"recall_at_{k}"] = metrics.recall_at_k(r.indices, ep.supporting, k)
    return rec


def iter_cells(cfg: RunConfig) -> Iterator[tuple[str | None, str, int | None]]:
    tasks: Sequence[str | None] = cfg.tasks or BENCHMARKS[cfg.benchmark].tasks or (None,)
    for task in tasks:
        for label, value in cfg.lengths_resolved:
            yield task, label, value


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
                                     max_hops=cfg.max_hops, stop_threshold=cfg.stop_threshold, device=cfg.device,
                                     chunk_vectors=folder)
    if reader is None and cfg.reader is not None:
        reader = load_reader(cfg.reader, max_new_tokens=cfg.max_new_tokens, device=cfg.device)
    new = 0
    with _saved_on_exit(folder), path.open("a", encoding="utf-8") as fh:
        for task, label, value in iter_cells(cfg):
            episodes = cell_episodes(cfg, task, value)
            desc = f"{cfg.benchmark} {task or ''} {label}".strip()
            bar = tqdm(total=len(episodes), desc=desc, disable=not cfg.progress, unit="q")
            for start in range(0, len(episodes), cfg.batch_size):
                group = episodes[start : start + cfg.batch_size]
                for retriever in retrievers:
                    todo = [ep for ep in group
                            if sample_key(cfg.benchmark, task, label, retriever.name, ep.id) not in done]
                    if not todo:
                        continue
                    for ep, r in zip(todo, retriever.retrieve(todo), strict=True):
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
        diff = {k: (saved.get(k), v) for k, v in settings.items() if saved.get(k) != v}
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
    summary = {**summarize(records, settings), "peak_memory_mb": peak_memory_mb()}
    write_reports(summary, cfg.out)
    trained = [m for m in cfg.methods if m in NEEDS_CHECKPOINT]
    baselines = [m for m in cfg.methods if m in BASELINES]
    if trained and baselines:
        write_margins(records, trained, baselines, cfg.out)
    reference = next((m for m in ("dense", "cosine") if m in cfg.methods), None)  # single-hop dense search
    if reference is not None and any("recall_at_2" in r for r in records):
        write_recall(records, cfg.methods, cfg.out, RECALL_KS, reference)
    return summary
