"""The main job: train a Q-RAG retriever on CPU, prove it against the baselines, use it in a LangChain chain.

    make demo        # = python -m qrag.eval.demo [--minutes 15] [--output-dir runs/demo] [--samples 200]
    make demo ARGS="--model qrag/babilong-minilm-cpu --output-dir runs/shipped"   # no training: a shipped model

Six phases, each resumable (interrupt it with Ctrl-C or kill, run the same command again, it continues):

1. data: BabiLong-style qa1–qa5 (qrag's `babilong` source): training and validation haystacks of 160
   sentences (split `train`), held-out test samples at 1K, 4K and 32K tokens (split `test`, `--samples`
   per task and length). Each split's haystacks draw their background from one pool of real sentences
   (`data.filler_sentences` of the preset), so the whole job embeds a few ten thousand distinct sentences.
2. chunk vectors for training: the `babilong-cpu` preset trains the state tower only (`model.train_towers:
   state`), so every distinct sentence of the training and validation haystacks is embedded once, saved in
   OUT/chunk_vectors and shared by training, the evaluation and the untrained baselines. The phase also
   measures how fast this machine embeds, which plans the rest of the budget.
3. training: soft Q(λ) until the training budget is spent, with a live progress bar and periodic
   validation; the best validated model is OUT/train/best.
4. chunk vectors of the held-out haystacks (not needed for training, so after it).
5. held-out evaluation: qrag, qrag+stop (the stop rule), BM25, single-hop dense and cosine, untrained multi-hop on
   the same test samples, each retrieving the paper's budget of 6 chunks per question (qrag+stop as many as
   its rule keeps); one retrieval gives two tables, because a greedy method's first |SF| chunks are its
   |SF|-budget retrieval: fact EM at exactly |SF| chunks and at 6 chunks, with qrag's paired margin over the
   best baseline of every qa2/qa3 cell (OUT/eval/main_job.md), the plot and per-sample records (OUT/eval).
6. one question through a LangChain chain: `QRAGRetriever` with the trained model over a 32K-token test
   haystack, then the bundled SmolLM2 reader; the hops with their Q-values and where the stop rule cut.

The budget (`--minutes`, default 15) covers phases 1–6 on the machine it runs on. After phase 2 the job
estimates phases 4–6 from the embedding rate it measured; training gets the rest, and when that would be
less than `MIN_TRAIN_SHARE` of the budget the evaluation is scaled down to fewer samples per cell up front
(said on the console and in the report) rather than cutting training. Precision follows the CPU (`--precision
auto`): bf16 autocast where the CPU has native bf16 (AVX512-BF16, AMX), fp32 elsewhere, where emulated bf16
would be several times slower. OUT/job.json records each phase's time and the plan. `--model` skips training and
runs phases 4–6 on a trained checkpoint instead (a shipped name or a folder); an output folder holds the
results of one model only.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from qrag.eval.baselines import ADAPTIVE, BASELINES, make_retrievers
from qrag.eval.metrics import wilson_interval
from qrag.eval.report import margins
from qrag.eval.runner import read_results, run
from qrag.eval.sweep import BABILONG_SENTENCES, RunConfig, cell_episodes
from qrag.training.atomic import write_text_atomic
from qrag.training.data.build import build_episodes
from qrag.training.data.episode import Episode
from qrag.training.learn.config import TrainConfig, load_preset
from qrag.training.learn.trainer import Trainer
from qrag.training.model.precision import choose_precision
from qrag.training.model.qnet import CheckpointError, QNetwork
from qrag.training.model.towers import precision_autocast
from qrag.training.search import pool_neighbours
from qrag.training.search.chunk_vectors import ChunkVectorCache
from qrag.training.search.index import IndexLoadError

PRESET = "babilong-cpu"
TASKS = ("qa1", "qa2", "qa3", "qa4", "qa5")
LENGTHS = ("1k", "4k", "32k")
METHODS = ("bm25", "dense", "cosine", "multihop", "qrag", "qrag+stop")
"""Cosine search with the base encoder beside its untrained inner product (`dense`): the floor a vector store gives."""
HARD_TASKS = ("qa2", "qa3")
PAPER_BUDGET = 6  # chunks per question, as the reference evaluates BabiLong before its reader answers
JOB_FILE = "job.json"
REPORT_FILE = "main_job.md"
MIN_TRAIN_SHARE = 0.68
"""Training gets at least this share of the budget: an evaluation that would leave less is scaled down."""
FP32_TRAINABLE_LAYERS = 6
"""In fp32 (no native bf16) an update costs about twice as much, so the state tower trains its six transformer
blocks but not its embeddings (`model.train_mode: top_layers`): no dense embedding gradient, AdamW over half the
parameters, about 1.12x the transitions at the same accuracy per transition (docs/RESULTS.md, "The main job")."""
EVAL_SENTENCES_PER_SAMPLE = 32.0
"""The held-out evaluation of one test sample (six methods, six chunks each; cosine reuses dense's vectors) costs
at most about as much time as embedding this many sentences in phase 2 (the runs in docs/RESULTS.md, "The main job
on 2 CPU cores, with and without native bf16", measured about 24 without native bf16)."""
CHAIN_SECONDS = 45.0
"""Phase 6 (loading the reader, one chain): an allowance, not a measurement of this machine."""
SLACK_SECONDS = 20.0
"""Loading and saving between phases."""
MIN_SAMPLES = 20
"""The fewest test samples per task and length a scaled evaluation keeps."""
FALLBACK_SENTENCES_PER_S = 200.0
"""Embedding rate assumed when phase 2 embedded nothing to time (every vector was cached)."""
TRAINED_HERE = "trained by this job"


class Job:
    """OUT/job.json: seconds spent per phase (summed over interrupted and resumed runs) and what is done."""

    def __init__(self, out: Path) -> None:
        self.path = out / JOB_FILE
        self.state: dict[str, Any] = (json.loads(self.path.read_text(encoding="utf-8")) if self.path.is_file()
                                      else {"seconds": {}, "done": []})

    def save(self) -> None:
        write_text_atomic(self.path, json.dumps(self.state, indent=1))

    def spent(self, phase: str | None = None) -> float:
        seconds: dict[str, float] = self.state["seconds"]
        return seconds.get(phase, 0.0) if phase else sum(seconds.values())

    def is_done(self, phase: str) -> bool:
        return phase in self.state["done"]

    @contextmanager
    def phase(self, name: str, title: str) -> Iterator[None]:
        """Time a phase; its seconds are recorded even when it is interrupted."""
        print(f"\n=== {title} ===", flush=True)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.state["seconds"][name] = self.spent(name) + time.perf_counter() - start
            self.save()

    def finish(self, name: str) -> None:
        self.state["done"] = sorted(set(self.state["done"]) | {name})
        self.save()


def _sigterm_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def precision_context(precision: str) -> Any:
    """The chosen CPU precision for no-grad encoding (training uses the trainer's own setting)."""
    return precision_autocast(torch.device("cpu"), precision)


def plan_samples(budget_s: float, spent_s: float, rate: float, samples: int, test_per_sample: int,
                 test_sentences: int) -> tuple[int, float]:
    """(test samples per cell, training seconds) so that the job fits `budget_s`.

    The evaluation of `samples` per cell (`test_per_sample` test episodes for each unit of `samples`) is estimated
    from the embedding rate (`EVAL_SENTENCES_PER_SAMPLE`), with the held-out vectors (`test_sentences` not yet
    embedded), the chain and some slack; when the rest would leave training less than `MIN_TRAIN_SHARE` of the
    budget, the samples are scaled down (to at least `MIN_SAMPLES`).
    """
    fixed = spent_s + test_sentences / rate + CHAIN_SECONDS + SLACK_SECONDS
    per_sample = EVAL_SENTENCES_PER_SAMPLE * test_per_sample / rate  # seconds of evaluation per unit of samples
    floor_train = MIN_TRAIN_SHARE * budget_s
    if budget_s - fixed - per_sample * samples < floor_train:
        samples = max(min(samples, MIN_SAMPLES), int((budget_s - fixed - floor_train) / per_sample))
    return samples, budget_s - fixed - per_sample * samples


def load_store(folder: Path, key: str) -> ChunkVectorCache:
    """The chunk-vector cache of an earlier run, or an empty one (a cache of another tower is rebuilt)."""
    if not folder.exists():
        return ChunkVectorCache(key)
    try:
        return ChunkVectorCache.load(folder, key)
    except IndexLoadError as e:
        print(f"not reusing {folder}: {e}")
        return ChunkVectorCache(key)


def eval_config(out: Path, samples: int, lengths: Sequence[str], filler_sentences: int | None) -> RunConfig:
    return RunConfig(benchmark="babilong", out=out / "eval", methods=METHODS, tasks=TASKS, lengths=tuple(lengths),
                     num_samples=samples, budget=PAPER_BUDGET, progress=True,
                     filler_sentences=filler_sentences).validate()


def _cells(cfg: RunConfig) -> list[tuple[str, str, int | None]]:
    return [(t, lab, v) for t in TASKS for lab, v in cfg.lengths_resolved]


def at_sf(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as exactly |SF| chunks scores them: a greedy method's first |SF| chunks of its budget-6
    retrieval are its |SF|-budget retrieval (`fact_em_at_sf`); the adaptive qrag+stop keeps its own count."""
    return [r if r["method"] in ADAPTIVE else {**r, "fact_em": r["fact_em_at_sf"]} for r in records]


def rate_cell(values: Sequence[float]) -> str:
    """A cell of 0/1 scores: its mean and 95% Wilson interval, in as many decimals as the interval supports (two
    below 400 samples: a 27-sample cell is known to about ±0.1, not to three decimals)."""
    lo, hi = wilson_interval(sum(values), len(values))
    digits = 3 if len(values) >= 400 else 2
    return f"{sum(values) / len(values):.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def results_report(records: Sequence[dict[str, Any]], samples: int, lengths: Sequence[str]) -> str:
    """Markdown: fact EM per task and method at each length with its 95% interval (`rate_cell`), at exactly |SF|
    chunks and at the paper's budget of 6, then the paired margins over the best baseline of every qa2/qa3 cell at
    |SF| chunks."""
    lines = []
    views = (("exactly |SF| chunks per question (qrag+stop: as many as its stop rule keeps, at most the model's "
              "hops)", at_sf(records)), (f"the paper's budget of {PAPER_BUDGET} chunks per question (qrag+stop as "
                                         "above)", list(records)))
    for title, view in views:
        cells: dict[tuple[str, str, str], list[float]] = {}
        for r in view:
            cells.setdefault((r["method"], r["task"], r["length"]), []).append(float(r["fact_em"]))
        lines += [f"\nHeld-out fact EM (all supporting facts retrieved) with {title}, {samples} test samples per task "
                  "and length:\n", "| length | method | " + " | ".join(TASKS) + " | mean |",
                  "|---|---|" + "---|" * (len(TASKS) + 1)]
        for length in lengths:
            for m in METHODS:
                vals = {t: v for t in TASKS if (v := cells.get((m, t, length)))}
                if vals:
                    lines.append(f"| {length} | {m} | " + " | ".join(rate_cell(vals[t]) if t in vals else "-" for t in TASKS)
                                 + f" | {rate_cell([x for v in vals.values() for x in v])} |")
    for method in ("qrag", "qrag+stop"):
        rows = [r for r in margins(at_sf(records), method, BASELINES) if r["task"] in HARD_TASKS]
        rows.sort(key=lambda r: (r["task"], BABILONG_SENTENCES[r["length"]]))
        lines += [f"\n{method} (|SF| chunks) against the best baseline of each qa2/qa3 cell (paired fact EM "
                  "difference, 95% interval):\n"]
        lines += [f"- {r['task']} {r['length']}: {r['method_mean']:.3f} vs {r['best_baseline']} {r['baseline_mean']:.3f}: "
                  f"{r['margin']:+.3f} ± {r['ci95']:.3f} {'ahead' if r['ahead'] else 'NOT significantly ahead'} "
                  f"(n={r['n']})" for r in rows]
    return "\n".join(lines) + "\n"


def run_chain(model: QNetwork, episode: Episode, max_hops: int, reader_name: str) -> None:
    """One question through `QRAGRetriever | prompt | local LLM`, with the hops and the stop shown."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    from qrag.eval.reader import build_prompt, load_reader
    from qrag.integrations import QRAGRetriever
    from qrag.training.search.searcher import MultiHopSearcher, SearchConfig

    task = str(episode.metadata.get("task"))
    retriever = QRAGRetriever.from_texts(list(episode.chunks), model=model, k=None, max_hops=max_hops,
                                         order="document", ordered=True)  # a haystack is one document
    print(f"haystack: {episode.num_chunks} sentences (~{episode.metadata.get('num_tokens')} tokens), {task}; "
          f"gold supporting sentences {list(episode.supporting)}, gold answer {episode.answer!r}")
    print(f"Q: {episode.question}")
    every_hop = MultiHopSearcher(model, retriever.searcher.store, SearchConfig(k=max_hops, max_hops=max_hops))
    for hit in every_hop.search_one(episode.question).hits:
        gold = "gold" if int(hit.chunk.id) in episode.supporting else "    "
        cut = "   <- below the stop threshold: the retriever stops here" if hit.past_stop else ""
        print(f"  hop {hit.hop}: Q={hit.q_value:+.3f} {gold} [{int(hit.chunk.id):4d}] {hit.chunk.text}{cut}")
    if reader_name == "none":
        return
    reader = load_reader(reader_name, max_new_tokens=16)

    def prompt(inputs: dict[str, Any]) -> str:
        return build_prompt("babilong", task, inputs["question"], [d.page_content for d in inputs["docs"]])

    chain = ({"docs": retriever, "question": RunnablePassthrough()} | RunnableLambda(prompt)
             | RunnableLambda(lambda p: reader.generate([p])[0]) | StrOutputParser())
    docs = retriever.invoke(episode.question)
    found = {int(d.id) for d in docs if d.id is not None}
    print(f"the retriever returned {len(docs)} sentences ({'all' if set(episode.supporting) <= found else 'not all'} "
          f"supporting facts) to the reader ({reader_name}):")
    answer = chain.invoke(episode.question).strip()
    print(f"  answer: {answer!r}   (gold: {episode.answer!r})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=15.0, help="time budget of the whole job (default 15)")
    parser.add_argument("--output-dir", default="runs/demo")
    parser.add_argument("--samples", type=int, default=200,
                        help="test samples per task and length (default 200; fewer, said up front, where the budget "
                             "cannot fit them with training at its share)")
    parser.add_argument("--num-train", type=int, default=None, help="training episodes (default: the preset's)")
    parser.add_argument("--num-val", type=int, default=None, help="validation episodes (default: the preset's)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="CPU precision (default auto: bf16 where the CPU has native bf16, fp32 elsewhere; bf16 "
                             "on a CPU without it warns and runs fp32)")
    parser.add_argument("--train-minutes", type=float, default=None,
                        help="training time (default: what the budget leaves after the estimated evaluation)")
    parser.add_argument("--lengths", default=",".join(LENGTHS), help="held-out lengths (default 1k,4k,32k)")
    parser.add_argument("--train-layers", type=int, default=None,
                        help="train only the state tower's top N layers on the frozen layers below them, computed "
                             "once per state (trainer.train_layers; default: the precision's choice)")
    parser.add_argument("--model", default=None,
                        help="evaluate and serve this trained checkpoint (a shipped name such as "
                             "qrag/babilong-minilm-cpu, or a folder) instead of training one")
    parser.add_argument("--reader", default="smollm2",
                        help="reader LLM of the chain: 'smollm2' (bundled, default), a transformers folder, or "
                             "'none' to show the hops without an LLM")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.samples < 1:
        parser.error(f"--minutes must be > 0 and --samples >= 1, got {args.minutes:g} and {args.samples}.")
    if args.train_minutes is not None and args.train_minutes <= 0:
        parser.error(f"--train-minutes must be > 0, got {args.train_minutes}.")
    if args.train_layers is not None:
        if args.model:
            parser.error(f"--train-layers {args.train_layers} trains the state tower and --model {args.model} "
                         "evaluates a trained checkpoint without training: pass one of them.")
        layers = _encoder_layers(load_preset(PRESET).model.encoder)
        if not 1 <= args.train_layers < layers:
            parser.error(f"--train-layers must be between 1 and {layers - 1} (the state tower has {layers} layers; "
                         f"leave it out to train every layer), got {args.train_layers}.")
    args.lengths = tuple(x.strip().lower() for x in args.lengths.split(",") if x.strip())
    bad = [x for x in args.lengths if x not in BABILONG_SENTENCES]
    if bad or not args.lengths:
        parser.error(f"--lengths {','.join(bad) or '(empty)'}: use lengths from {', '.join(BABILONG_SENTENCES)}.")
    model = None
    if args.model is not None:
        try:
            model = QNetwork.from_pretrained(args.model)
        except CheckpointError as e:
            parser.error(f"--model: {e}")
    out = Path(args.output_dir)
    source = args.model or TRAINED_HERE
    job = Job(out)
    before = job.state.get("model", TRAINED_HERE) if job.path.is_file() else source  # older job.json: trained
    if before != source:
        parser.error(f"{out} holds the results of {before}, not {source}: pass another --output-dir (an output "
                     "folder holds one model's results).")
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    out.mkdir(parents=True, exist_ok=True)
    job.state["model"] = source
    config = load_preset(PRESET)
    config.trainer.output_dir = str(out / "train")
    config.trainer.resume = True
    if args.num_train:
        config.data.num_train = args.num_train
    if args.num_val:
        config.data.num_val = args.num_val
    precision, why = choose_precision(args.precision, torch.device("cpu"))
    config.trainer.mixed_precision = "bf16" if precision == "bf16" else "no"
    if args.train_layers is not None:
        config.model.train_mode, config.trainer.train_layers = "full", args.train_layers
    elif precision == "fp32" and model is None:
        config.model.train_mode, config.model.trainable_layers = "top_layers", FP32_TRAINABLE_LAYERS
    print(f"qrag main job: precision {precision} ({why}); budget {args.minutes:g} min on "
          f"{torch.get_num_threads()} threads, output {out} (already spent: {job.spent() / 60:.1f} min)")
    if config.model.train_mode == "top_layers":
        print("fp32: the state tower trains its transformer blocks, not its embeddings (more updates per minute)")
    try:
        return _main(args, out, job, config, precision, model)
    except KeyboardInterrupt:
        print(f"\ninterrupted: everything finished so far is kept in {out}; run the same command to resume.")
        return 130


def _encoder_layers(encoder: str) -> int:
    """How many transformer layers the encoder `encoder` (a name or folder) has, read from its config alone."""
    from transformers import AutoConfig

    from qrag.training.model.encoders import resolve_encoder

    return int(AutoConfig.from_pretrained(resolve_encoder(encoder)).num_hidden_layers)


def _main(args: argparse.Namespace, out: Path, job: Job, config: TrainConfig, precision: str,
          model: QNetwork | None) -> int:
    store_dir = out / "chunk_vectors"
    with job.phase("data", "1/6 data"):
        untrained = QNetwork.from_config(config.model)  # the untrained start: the multi-hop and dense baselines
        train, val = build_episodes(config.data, neighbours=pool_neighbours) if model is None else ([], [])
        cfg = eval_config(out, args.samples, args.lengths, config.data.filler_sentences)
        cells = [cell_episodes(cfg, task, value) for task, _, value in _cells(cfg)]
        test = [ep for episodes in cells for ep in episodes]
        print(f"training {len(train)} and validation {len(val)} episodes (qa1–qa5, {config.data.num_sentences} "
              f"sentences), {len(test)} held-out test samples ({args.samples} per task at {', '.join(args.lengths)}); "
              f"background from {config.data.filler_sentences or 'all'} sentences per split")
    store = load_store(store_dir, untrained.chunk_vectors_key())
    with job.phase("vectors", "2/6 chunk vectors for training (frozen chunk tower: each distinct sentence once)"):
        texts = list(dict.fromkeys(t for ep in (*train, *val) for t in ep.chunks))
        embed(store, store_dir, untrained, texts, precision, job)
    samples = job.state.get("samples", args.samples)
    with job.phase("train", "3/6 training (soft Q(λ), state tower, live progress; validation every "
                   f"{config.trainer.eval_every} transitions)"):
        if model is not None:
            print(f"skipped: evaluating {args.model} (trained elsewhere)")
        elif not job.is_done("train"):
            if args.train_minutes:
                config.trainer.max_minutes = args.train_minutes
            else:
                rate = job.state.get("sentences_per_s", FALLBACK_SENTENCES_PER_S)
                unseen = sum(t not in store for t in dict.fromkeys(t for ep in test for t in ep.chunks))
                samples, train_s = plan_samples(60 * args.minutes, job.spent(), rate, args.samples,
                                                len(test) // args.samples, unseen)
                job.state["samples"] = samples
                if samples < args.samples:
                    print(f"the evaluation of {args.samples} samples per task and length would leave training less "
                          f"than {MIN_TRAIN_SHARE:.0%} of the budget on this machine ({rate:.0f} sentences/s): it "
                          f"is scaled to {samples} samples (said in the report); --minutes gives more")
                config.trainer.max_minutes = max(0.5, train_s / 60)
            print(f"training budget {config.trainer.max_minutes:.1f} min (resumes from {config.trainer.output_dir}/last)")
            summary = Trainer(config, train, val, chunk_cache=store).train()
            print(f"{summary['transitions']} transitions in all; best validation: "
                  f"{json.dumps(json.loads((out / 'train' / 'best' / 'eval.json').read_text()))}")
            job.finish("train")
    cfg = eval_config(out, samples, args.lengths, config.data.filler_sentences)
    with job.phase("test_vectors", "4/6 chunk vectors of the held-out haystacks"):
        test = [ep for episodes in cells for ep in episodes[:samples]]  # sample i is the same whatever the count
        embed(store, store_dir, untrained, list(dict.fromkeys(t for ep in test for t in ep.chunks)), precision)
    with job.phase("eval", "5/6 held-out evaluation"):
        trained = model or QNetwork.from_pretrained(out / "train" / "best")
        retrievers = make_retrievers(METHODS, encoder=untrained, checkpoint=trained, budget=cfg.budget,
                                     max_hops=config.env.max_hops,
                                     chunk_caches=[store])
        with precision_context(precision):
            run(cfg, retrievers=retrievers)
        report = results_report(read_results(cfg.out / "results.jsonl"), samples, args.lengths)
        if samples < args.samples:
            report = (f"The evaluation was scaled from {args.samples} to {samples} samples per task and length to fit "
                      "the budget with training at its share.\n" + report)
        (cfg.out / REPORT_FILE).write_text(report, encoding="utf-8")
        print(report)
        print(f"both tables: {cfg.out / REPORT_FILE}; the budget-{PAPER_BUDGET} table, plot and per-sample records: "
              f"{cfg.out}/{{table.md,plot.png,margins.md,results.jsonl}}")
    with job.phase("chain", "6/6 one question through a LangChain chain (QRAGRetriever | prompt | local LLM)"):
        episode = next(ep for ep in cell_episodes(cfg, "qa2", cfg.lengths_resolved[-1][1]))
        with precision_context(precision):
            run_chain(trained, episode, config.env.max_hops, args.reader)
    where = args.model or f"{out}/train/best"
    print(f"\ndone in {job.spent() / 60:.1f} min ({', '.join(f'{k} {v / 60:.1f}' for k, v in job.state['seconds'].items())}); "
          f"the trained model is {where}: QRAGRetriever.from_texts(texts, model='{where}')")
    return 0


def embed(store: ChunkVectorCache, folder: Path, model: QNetwork, texts: Sequence[str], precision: str,
          job: Job | None = None) -> None:
    """Embed the texts `store` lacks and save it; with `job`, record the embedding rate (sentences/s)."""
    missing = [t for t in texts if t not in store]
    print(f"{len(texts)} distinct sentences, {len(texts) - len(missing)} already cached")
    if not missing:
        return
    start = time.perf_counter()
    with precision_context(precision):
        store.vectors(model, missing, show_progress=True)
    if job is not None:
        job.state["sentences_per_s"] = len(missing) / (time.perf_counter() - start)
    store.save(folder)


if __name__ == "__main__":
    sys.exit(main())
