"""What a `qrag-eval` sweep is: the benchmarks, the sweep's settings (`RunConfig`) and its cells' episodes.

A sweep crosses tasks × lengths; each (task, length) cell is a list of generated or loaded episodes,
the same every call. Running it is `qrag.eval.runner`; the speed phase is `qrag.eval.speed`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qrag.eval.methods import METHODS
from qrag.training.data import Episode, load_episodes
from qrag.training.data.build import VALIDATION_SEED_OFFSET
from qrag.training.data.sources import SOURCES
from qrag.training.data.wiki import KINDS as WIKI_KINDS
from qrag.training.input_checks import check_out_path
from qrag.training.model.config import ENCODER_PRECISIONS
from qrag.training.search.settings import FILLS, FROM_MODEL, Fill, FromModel

FILL_CHOICES = (FROM_MODEL, *FILLS)
SPLITS = ("test", "val")
"""`--split`: the test split, or the validation episodes of a training run of the same seed."""
GENERATED = ("babilong", "ruler_niah", "wiki")
"""Sources whose episodes the sweep generates, and so can draw from either split."""


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
    default_tasks: tuple[str, ...] | None = None
    """Tasks swept when none are given (None: all of `tasks`)."""
    recall_ks: tuple[int, ...] = (2, 4, 8)
    """The k of the recall@k columns (recorded where a method returned at least k chunks)."""
    options: tuple[tuple[str, Any], ...] = ()
    """Source options every cell of the benchmark loads with (e.g. its number and kind of distractors)."""


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
    "wiki": Benchmark("wiki", WIKI_KINDS, None),
    # The task names the rows searched: 'test' (9 000-9 999, evaluation only) or 'val' (held out of training).
    "hotpotqa_pool": Benchmark("hotpotqa_pool", ("test", "val"), None, default_tasks=("test",), recall_ks=(2, 5, 10)),
    # Your questions (--data) over your corpus (--corpus), each searching the whole corpus (recall@5: what a
    # retriever with k = 5 hands a reader).
    "corpus": Benchmark("corpus", None, None, needs_path=True, recall_ks=(2, 4, 5, 8)),
    # HotpotQA's distractor setting over the same rows: the two gold passages and the pool's 8 BM25-nearest others.
    "hotpotqa_distractor": Benchmark("hotpotqa_pool", ("test", "val"), None, default_tasks=("test",), recall_ks=(2,),
                                     options=(("num_distractors", 8), ("negatives", "bm25"))),
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
    """Data file for file-based benchmarks (hotpotqa, musique, 2wiki, ruler_qa, jsonl; corpus: the questions)."""
    corpus: str | None = None
    """`corpus` only: the passages the questions of `data` search (a JSON Lines file of {"id", "text"} or a folder
    of .txt/.md files)."""
    budget: int | None = None
    """Chunks per question for non-adaptive methods; None: |SF| of each sample."""
    max_hops: int | None = None
    """Most hops for multi-hop methods; None: the trained checkpoint's horizon (saved with it)."""
    stop_threshold: float | None = None
    """Stop-rule threshold for 'qrag+stop' and the guard; None: the checkpoint's saved (calibrated) threshold."""
    fill: Fill | FromModel = FROM_MODEL
    """What ranks the qrag methods' results past their hops: 'state', 'question' (the off-domain guard, METHOD.md
    §4.4), 'question_unguarded' or 'model': the checkpoint's saved choice."""
    lexical_weight: float | FromModel = FROM_MODEL
    """The qrag methods' weight of lexical evidence at every hop (METHOD.md §4.5; 0: Q alone), or 'model': the
    checkpoint's saved weight."""
    seed: int = 0
    """Generator seed."""
    split: str = "test"
    """Generated benchmarks (babilong, niah, wiki): 'test', or 'val', the episodes a training run of the same seed
    validates on (`qrag.training.data.build`: the training distribution or val pages, with a disjoint seed), to
    choose between models or settings without reading the test split."""
    distractors: int | None = None
    """`wiki` only: non-gold passages per question, from the test pages (None: the source's default, 30); 1 000
    or more makes each question search all of the test split's pages, a corpus rather than a short list."""
    filler_sentences: int | None = None
    """`babilong` only: every haystack's background from one pool of this many test-split sentences
    (`qrag.training.data.babilong.filler_pool`); None: all of the text sources."""
    background: str | None = None
    """`babilong` only: a text file of background sentences, one per line, that fills every haystack instead of
    the text sources (cycled from a random line where the haystack is longer): text held out of a model's training
    (`scripts/held_out_background.py` writes HotpotQA's passages, less every sentence the text sources hold)."""
    max_new_tokens: int = 32
    """Reader tokens per answer."""
    device: str | None = None
    """Torch device for encoders and the reader."""
    chunk_vectors: Path | None = None
    """Folder that keeps chunk vectors between runs (`ChunkVectorFolder`); None: embed afresh each run."""
    batch_size: int = 32
    """Questions each retriever handles together, fewer where their haystacks hold over `runner.MAX_GROUP_CHUNKS`
    chunks together (their `retrieval_s` is the group's time shared equally; 1 measures single-question
    latency)."""
    samples_at: dict[str, int] = field(default_factory=dict)
    """Samples per cell at given lengths, overriding `num_samples` there (e.g. {'10m': 50})."""
    precision: str = "fp32"
    """The encoders' arithmetic while retrieving: 'fp32', 'bf16' (GPUs, CPUs with AVX512-BF16) or 'fp16' (GPU)."""
    speed_lengths: tuple[str, ...] = ()
    """Lengths at which one haystack is indexed from scratch and 1…H-hop searches are timed (`qrag.eval.speed`)."""
    speed_hops: tuple[int, ...] | None = None
    """Hop counts the speed phase times (None: 1 to the multi-hop methods' horizon)."""
    speed_queries: int = 20
    """Questions the speed phase times one at a time (its batch is `batch_size` questions)."""
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
        if (self.corpus is not None) != (bench.source == "corpus"):
            raise ValueError("--corpus goes with the corpus benchmark: qrag-eval corpus --data QUESTIONS --corpus PASSAGES"
                             if self.corpus is not None else "benchmark 'corpus' needs --corpus PATH (your passages).")
        if self.corpus is not None and not Path(self.corpus).expanduser().exists():
            raise ValueError(f"corpus {self.corpus!r} does not exist.")
        for name, low in (("num_samples", 1), ("batch_size", 1), ("max_new_tokens", 1), ("budget", 1),
                          ("max_hops", 1), ("seed", 0), ("speed_queries", 1)):
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
        if self.split not in SPLITS:
            raise ValueError(f"split (--split) must be one of {', '.join(SPLITS)}, got {self.split!r}.")
        if self.split != "test" and bench.source not in GENERATED:
            raise ValueError(f"--split {self.split} applies to the generated benchmarks only ("
                             f"{', '.join(b for b, x in BENCHMARKS.items() if x.source in GENERATED)}), not "
                             f"{self.benchmark!r}, whose file holds its own split.")
        if self.filler_sentences is not None:
            if bench.source != "babilong":
                raise ValueError(f"--filler-sentences applies to the babilong benchmark only, not {self.benchmark!r}.")
            n = self.filler_sentences
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"filler_sentences (--filler-sentences) must be an integer >= 1, got {n!r}.")
        if self.background is not None:
            if bench.source != "babilong":
                raise ValueError(f"--background applies to the babilong benchmark only, not {self.benchmark!r}.")
            if self.filler_sentences is not None:
                raise ValueError("--background and --filler-sentences both choose the background: give one.")
            read_background(self.background)  # the file is read and checked before any work
        t = self.stop_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)):
            raise ValueError(f"stop_threshold (--stop-threshold) must be a finite number, got {t!r}.")
        if self.fill not in FILL_CHOICES:
            raise ValueError(f"fill (--fill) must be one of {', '.join(FILL_CHOICES)}, got {self.fill!r}.")
        w = self.lexical_weight
        if w != FROM_MODEL and (isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0):
            raise ValueError(f"lexical_weight (--lexical-weight) must be a finite number >= 0 or 'model', got {w!r}.")
        if self.precision not in ENCODER_PRECISIONS:
            raise ValueError(f"precision (--precision) must be one of {', '.join(ENCODER_PRECISIONS)}, got "
                             f"{self.precision!r}.")
        if self.precision == "fp16" and not str(self.device or "cpu").startswith("cuda"):
            raise ValueError(f"--precision fp16 needs a GPU (--device cuda), not device {self.device or 'cpu'!r}; "
                             "on a CPU use bf16 (fast with AVX512-BF16/AMX) or fp32.")
        if self.precision != "fp32" and self.chunk_vectors is not None:
            raise ValueError(f"--chunk-vectors keeps fp32 vectors between runs; with --precision {self.precision} "
                             "drop --chunk-vectors (each distinct chunk is still embedded once per run).")
        check_out_path(self.out, "--out", folder=True)
        self.lengths_resolved = [(lab, parse_length(lab, bench)) for lab in (self.lengths or bench.default_lengths)]
        if not self.lengths_resolved:
            self.lengths_resolved = [("-", None)]
        labels = [lab for lab, _ in self.lengths_resolved]
        for label, n in self.samples_at.items():
            if label.lower() not in [lab.lower() for lab in labels]:
                raise ValueError(f"--samples-at names length {label!r}, which the sweep does not run; its lengths: "
                                 f"{', '.join(labels)}.")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"--samples-at {label}={n!r}: the number of samples must be an integer >= 1.")
        for label in self.speed_lengths:
            parse_length(label, bench)  # a benchmark without lengths, or a bad length, is named here
        if self.speed_hops is not None and (not self.speed_hops or min(self.speed_hops) < 1):
            raise ValueError(f"--speed-hops must name hop counts >= 1, got {self.speed_hops!r}.")
        return self

    def samples(self, label: str) -> int:
        """Samples per cell at the length labelled `label`."""
        at = {lab.lower(): n for lab, n in self.samples_at.items()}
        return at.get(label.lower(), self.num_samples)


def parse_length(label: str, bench: Benchmark) -> int | None:
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


@functools.lru_cache(maxsize=2)
def read_background(path: str) -> tuple[str, ...]:
    """The non-empty lines of a background file (`RunConfig.background`), read once per process.

    Raises:
        ValueError: the file is missing, unreadable or holds no sentence.
    """
    file = Path(path).expanduser()
    try:
        lines = tuple(line.strip() for line in file.read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"background (--background) {str(file)!r} cannot be read ({type(e).__name__}: {e}); give a "
                         "UTF-8 text file of sentences, one per line.") from None
    sentences = tuple(line for line in lines if line)
    if not sentences:
        raise ValueError(f"background (--background) {str(file)!r} holds no sentence; give a text file of "
                         "sentences, one per line.")
    return sentences


def cell_episodes(cfg: RunConfig, task: str | None, length: int | None, num_samples: int | None = None) -> list[Episode]:
    """The samples of one (task, length) cell of a validated sweep (deterministic: the same every call);
    `num_samples` defaults to the sweep's."""
    bench = BENCHMARKS[cfg.benchmark]
    kw: dict[str, Any] = {"task": task, "num_samples": num_samples or cfg.num_samples, "seed": cfg.seed}
    if bench.source in GENERATED:
        kw["split"] = "test"
        if cfg.split == "val":  # what a training run of this seed validates on (build_episodes)
            kw["split"] = SOURCES[bench.source].val_split
            kw["seed"] = cfg.seed + VALIDATION_SEED_OFFSET
    if bench.source == "hotpotqa_pool":  # its tasks are its splits; every question searches the split's whole pool
        kw["split"] = kw.pop("task")
    kw.update(bench.options)
    if cfg.distractors is not None:
        kw["num_distractors"] = cfg.distractors
    if cfg.filler_sentences is not None:
        kw["filler_sentences"] = cfg.filler_sentences
    if cfg.background is not None:
        kw["background"] = read_background(cfg.background)
    if bench.length_kind == "sentences":
        kw["num_sentences"] = length
    elif bench.length_kind == "tokens":
        kw["num_tokens"] = length
    if cfg.data is not None:
        kw["path"] = str(Path(cfg.data).expanduser())
    if cfg.corpus is not None:
        kw["corpus"] = str(Path(cfg.corpus).expanduser())
    if "neighbours" in SOURCES[bench.source].options:
        from qrag.training.search import pool_neighbours

        kw["neighbours"] = pool_neighbours  # hard negatives of num_distractors search the pool
    return load_episodes(bench.source, **kw)


def iter_cells(cfg: RunConfig) -> Iterator[tuple[str | None, str, int | None]]:
    bench = BENCHMARKS[cfg.benchmark]
    tasks: Sequence[str | None] = cfg.tasks or bench.default_tasks or bench.tasks or (None,)
    for task in tasks:
        for label, value in cfg.lengths_resolved:
            yield task, label, value


