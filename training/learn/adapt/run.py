"""`qrag-adapt`'s phases: a shipped model taught a corpus, with questions built from it (and a team's, if any).

1. **questions**: questions built from the corpus (`qrag.training.data.synthetic`) and the team's labelled ones,
   each set split into training and held-out questions; the horizon is the median number of supporting passages.
2. **embed**: the corpus's chunk vectors, once (the chunk tower is frozen): hard negatives, training and the choice
   all read them; kept in DIR/work/vectors, so a resumed run embeds nothing twice.
3. **start**: the start scored as the choice scores every candidate, its stop rule calibrated first (how long that
   takes sets the time the choice is given).
4. **train**: soft Q(λ) from the start (the `corpus-cpu` preset), rehearsing a share of the start's own training
   questions, for the time the budget leaves; resumable (`qrag.training.learn.trainer`).
5. **choose**: the fine-tune blended with the start at each weight and horizon, each candidate's stop rule
   calibrated on the held-out questions at its horizon before it is scored, one chosen
   (`qrag.training.learn.adapt.choice`) and written to DIR/model with the threshold it was scored with.
6. **report**: DIR/report.md (`qrag.training.learn.adapt.report`).

Every phase is timed and recorded when it ends (`qrag.training.learn.adapt.folder`); a run stopped anywhere goes on
from the phase it was in.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from qrag.training.data.corpus import Question, iter_corpus, read_corpus
from qrag.training.data.episode import Episode
from qrag.training.data.label_formats import read_labels
from qrag.training.data.synthetic import SyntheticError, SyntheticQuestion, make_questions
from qrag.training.learn.adapt.choice import (
    CHOICE_K,
    FEW_UPDATES,
    START_HOPS,
    WEIGHTS,
    Candidate,
    choose,
    standard_error,
)
from qrag.training.learn.adapt.folder import (
    AdaptError,
    AdaptFolder,
    AdaptOptions,
    Request,
    digest,
)
from qrag.training.learn.checkpoint_files import MODEL_DIR
from qrag.training.learn.config import EnvConfig, TrainConfig, init_model, load_preset, takes_train_layers
from qrag.training.learn.evaluation import evaluate
from qrag.training.learn.stop_calibration import choose_threshold
from qrag.training.model.blend import blend_networks
from qrag.training.model.precision import choose_precision
from qrag.training.model.qnet import QNetwork
from qrag.training.model.shipped import resolve_checkpoint
from qrag.training.model.towers import precision_autocast
from qrag.training.model.trunk import check_splittable
from qrag.training.overlay import ConfigError
from qrag.training.search.chunk_vectors import ChunkVectorFolder
from qrag.training.search.hops import stop_point
from qrag.training.search.index import ChunkIndex, weighs_pairs
from qrag.training.search.neighbours import pool_neighbours
from qrag.training.search.searcher import MultiHopSearcher
from qrag.training.search.settings import SearchConfig
from qrag.training.search.windows import Windows

PRESET = "corpus-cpu"
MIN_QUESTIONS = 30
"""Fewest training and held-out questions together a run needs."""
HELD_OUT = (0.1, 80)
"""Share of the built questions held out to choose on, and the most held out (scored once per candidate at three
horizons over the whole corpus: 120 took 2 of a 30-minute budget's minutes on 2 AVX2 cores, per candidate)."""
LABELLED_HELD_OUT = 0.2
"""Share of a team's labelled questions held out (at least one, from five questions on)."""
MAX_HORIZON = 6
START_DATA = {"qrag/hotpotqa-minilm": "hotpotqa_pool"}
"""The start's own validation data, by shipped name: what guards what it knew."""
START_ROWS = 200
"""The start's validation questions scored per candidate (in the distractor setting: 8 BM25 distractors); with 100 the
guard's noise was larger than its tolerance (blends read 0.860-0.875 against the start's 0.880, not in the order of
their weights); 300 cost a minute per candidate on 2 AVX2 cores."""
WARMUP_UPDATES = 10
"""Updates over which the learning rate rises: a 30-minute run on 2 cores makes about 90 (the preset's 50 would
spend half of them warming up)."""
LEARNING_RATE = 1e-4
"""The fine-tune's learning rate (the preset's). At 3e-4 the held-out built questions rose faster (fact recall 0.576
by 1 024 transitions against 0.535, 0.594 by 2 048 against 0.568) but the model it shipped found fewer passages of
questions people wrote (StrategyQA over the same summaries, recall@5 −0.034 ± 0.018): it learned the built questions'
form more than the corpus (results/HISTORY.md, "qrag-adapt, third and fourth runs")."""
NEGATIVES = 100
"""Negatives per training episode (the `corpus-cpu` preset's), three quarters of them hard."""
REHEARSE_SHARE = 0.25
"""Share of the training episodes that are the start's own training questions (rehearsal)."""
LABELLED_SHARE = 0.5
"""Least share of the run's own training episodes (built and labelled, before rehearsal) that are the team's labelled
questions: each is repeated as often as it takes. Drawn uniformly among 4 000 built questions, 100 labelled ones would be
2 % of the episodes, and a 30-minute run (about 2 400 episodes on 2 AVX2 cores) would see each of them half a time."""
CHOICE_MARGIN = 1.3
"""The time the choice is given: this many times the start's scoring, per blend. Each candidate is searched once
without a stop rule at the longest horizon and its threshold calibrated on those hops (`held_out_scores`), so its
scoring costs about what the start's did whatever its Q-values (searched with the start's threshold, a fine-tune took
more hops: 2.1 times the start's time on 2 AVX2 cores)."""
CHOICE_SHARE = 0.12
"""Most of the budget the blends' scoring may take: as many blends are scored as the start's measured scoring time
says fit (at least the fine-tune itself), so a slow CPU spends its minutes training, not choosing."""
PREFERRED_WEIGHTS = (1.0, 0.5, 0.75, 0.25)
"""The blends scored, in this order while they fit: the fine-tune first (the rule's favourite at equal recall), then
the midpoint, then the quarters."""
EMBED_SLICE = 1024
"""Passages embedded between two saves of the vectors."""


class Adapt:
    """One run of `qrag-adapt` (module docstring). `prepare` checks everything before any work; `run` does it."""

    def __init__(self, options: AdaptOptions, clock: Callable[[], float] = time.perf_counter) -> None:
        self.options, self.clock = options, clock
        self.started = clock()
        self.folder = AdaptFolder(options.out)

    # ------------------------------------------------------------------ checks, before any work
    def prepare(self) -> None:
        """Read and check the corpus, the questions, the start and the output folder.

        Raises:
            AdaptError, SyntheticError, EpisodeError, FileNotFoundError, ConfigError: named by value, with the fix.
        """
        tick = self.clock()
        o = self.options
        if not o.minutes > 0 or o.minutes != o.minutes or o.minutes == float("inf"):
            raise AdaptError(f"--minutes must be a positive number of minutes, got {o.minutes!r}.")
        if o.max_questions < 0 or (o.max_questions == 0 and o.questions is None):
            raise AdaptError(f"--max-questions must be >= 0 (0: build none, train on --questions alone), got "
                             f"{o.max_questions}{'' if o.max_questions < 0 else ' without --questions'}.")
        self.model_config, self.start_horizon = init_model(o.init)
        if self.model_config.train_towers != "state":
            raise AdaptError(f"--init {o.init!r} trains its chunk tower; qrag-adapt fine-tunes models whose chunk tower "
                             "is frozen (train_towers 'state', as the shipped paragraph model), so the corpus is "
                             "embedded once.")
        if o.train_layers:  # asked by hand: a count the start's state tower cannot split is refused before any work
            check_splittable(QNetwork.from_pretrained(o.init).state_tower.encoder, o.train_layers, "--train-layers")
        self.corpus = read_corpus(o.corpus)
        labelled_lines: list[str] = []
        self.labelled: list[Question] = []
        self.weak_labels, self.skipped_labels = False, []
        if o.questions is not None:
            labels = read_labels(o.questions, self.corpus)  # any format teams have (label_formats)
            self.labelled = labels.questions
            self.weak_labels, self.skipped_labels = labels.weak, labels.skipped
            labelled_lines = Path(o.questions).expanduser().read_text(encoding="utf-8").splitlines()
        self.synthetic = make_questions(self.corpus, seed=o.seed, limit=o.max_questions) if o.max_questions else []
        total = len(self.synthetic) + len(self.labelled)
        if total < MIN_QUESTIONS:
            raise SyntheticError(
                f"the corpus {self.corpus.source} ({len(self.corpus.texts)} passages) yields {len(self.synthetic)} "
                f"questions{f' (and {len(self.labelled)} labelled)' if self.labelled else ''}; qrag-adapt needs at "
                f"least {MIN_QUESTIONS}. "
                + ("Label more questions, or build some beside yours with --max-questions 4000. "
                   if self.labelled and not o.max_questions else "")
                + "Questions come from passages that name one another by title or subject: "
                "give passages titles ({\"id\", \"title\", \"text\"}), a larger corpus (a few thousand passages), or "
                "labelled questions with --questions.")
        request = Request(
            corpus=str(Path(o.corpus).expanduser().resolve()),
            corpus_digest=digest([*self.corpus.ids, *self.corpus.texts]),
            questions=str(Path(o.questions).expanduser().resolve()) if o.questions else None,
            questions_digest=digest(labelled_lines) if o.questions else None, init=o.init, seed=o.seed,
            max_questions=o.max_questions, train_layers=o.train_layers)
        self.record = self.folder.open(request)
        self.spent_before = self.record.spent  # earlier invocations of a resumed run
        self.record.seconds["set-up"] = self.record.seconds.get("set-up", 0.0) + self.clock() - tick

    # ------------------------------------------------------------------ the phases
    def run(self) -> Path:
        """Every phase not done yet; returns DIR/model."""
        self.load()
        r, f = self.record, self.folder
        if not r.done("start"):
            with f.phase(r, "start"):
                with torch.no_grad():  # the start's validation passages join the cache first: scoring is timed alone
                    self.cache.vectors(self.start, [c for ep in self.start_val for c in ep.chunks])
                tick = self.clock()
                print(f"qrag-adapt: scoring the start on {len(self.held_out)} held-out questions"
                      f"{f' and {len(self.start_val)} of its own' if self.start_val else ''}", file=sys.stderr)
                r.facts["start"] = self._score(self.start, 0.0)
                r.facts["score_seconds"] = self.clock() - tick
                self.vector_folder.save()
        if not r.done("train"):
            with f.phase(r, "train"):
                self._train()
                self.vector_folder.save()
        if not r.done("choose"):
            with f.phase(r, "choose"):
                self._choose()
        from qrag.training.learn.adapt.report import write_report

        with f.phase(r, "report"):
            write_report(f, r, self.options)
        return f.model

    def load(self) -> None:
        """What every later phase reads: the threads and the budget, the questions and the corpus's vectors (their
        phases, if not done yet), the start, the corpus's index, the held-out questions and the start's own."""
        o, r, f = self.options, self.record, self.folder
        if o.threads:
            torch.set_num_threads(o.threads)
        self.budget_s = 60 * o.minutes - self.spent_before  # a resumed run has the rest of its budget
        if not r.done("questions"):
            with f.phase(r, "questions"):
                self._questions()
        self.start = QNetwork.from_pretrained(o.init).eval()
        self.vector_folder = ChunkVectorFolder(f.work / "vectors")
        self.cache = self.vector_folder.get(self.start.chunk_vectors_key())
        if not r.done("embed"):
            with f.phase(r, "embed"):
                self._embed()
        self.vectors = self.cache.vectors(self.start, list(self.corpus.texts))  # (N, D), all cached
        # long passages are searched by their best window, as `ChunkIndex.from_texts` does (few: not cached), embedded
        # in the arithmetic of the corpus's vectors
        windows = Windows.of(self.start, self.corpus.texts, precision=r.facts.get("embed_precision", "fp32"))
        self.index = ChunkIndex(self.vectors, self.corpus.texts, self.corpus.ids, encoder=self.start.config.encoder,
                                chunk_tower=self.start.chunk_tower_fingerprint(), windows=windows,
                                long_chunks="windows").with_lexical(pairs=weighs_pairs(self.start))
        self.held_out = self._held_out_questions()
        self.start_val = self._start_validation()

    def _left(self) -> float:
        """Seconds of the budget left now."""
        return self.budget_s - (self.clock() - self.started)

    def _questions(self) -> None:
        """Write work/train.jsonl and work/val.jsonl; record the counts, the horizon and ten examples. The built
        questions are split so that no held-out one shares a passage with a training one (`split_held_out`); the
        training ones that would are dropped, and counted ("dropped_overlapping")."""
        from qrag.training.data.synthetic import split_held_out

        rng = random.Random(f"qrag-adapt/{self.options.seed}")
        synth = list(self.synthetic)
        split = split_held_out(synth, share=HELD_OUT[0], cap=HELD_OUT[1], seed=self.options.seed)
        synth_val, synth_train, held = split.held_out, split.train, len(split.held_out)
        labelled = list(self.labelled)
        rng.shuffle(labelled)
        lab_held = max(1, round(LABELLED_HELD_OUT * len(labelled))) if len(labelled) >= 5 else 0
        lab_val, lab_train = labelled[:lab_held], labelled[lab_held:]
        c = self.corpus
        if not (lab_train or synth_train):
            raise SyntheticError(f"the {len(synth)} questions built from {c.source} share their passages so much that "
                                 f"holding {len(synth_val)} out leaves none to train on ({len(split.dropped)} dropped): "
                                 "pass a larger corpus or labelled questions with --questions.")

        def rows(sq: Sequence[SyntheticQuestion], lq: Sequence[Question], start: int) -> list[dict[str, Any]]:
            out = [q.record(c, f"qrag-adapt-{start + i}") for i, q in enumerate(sq)]
            out += [{"id": q.id, "question": q.question, "supporting": [c.ids[s] for s in q.supporting], "kind": "labelled"}
                    for q in lq]
            return out

        train, val = rows(synth_train, lab_train, held), rows(synth_val, lab_val, 0)
        work = self.folder.work
        work.mkdir(parents=True, exist_ok=True)
        for name, lines in (("train.jsonl", train), ("val.jsonl", val)):
            (work / name).write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
        sizes = [len(q.supporting) for q in (lab_train or synth_train)]
        horizon = min(MAX_HORIZON, max(1, round(statistics.median(sizes))))
        kinds: dict[str, int] = {}
        for q in synth:
            kinds[q.kind] = kinds.get(q.kind, 0) + 1
        self.record.facts.update({
            "passages": len(c.texts), "built": len(synth), "kinds": kinds, "labelled": len(labelled),
            "train_questions": len(train), "held_out_questions": len(val), "dropped_overlapping": len(split.dropped),
            "held_out_from": "labelled" if lab_val else "built", "horizon": horizon,
            "start_horizon": self.start_horizon,
            "examples": [{"question": text, "kind": kind, "passages": [[c.ids[s], c.texts[s][:240]] for s in support]}
                         for text, kind, support in [*((q.question, q.kind, q.supporting) for q in synth_train),
                                                     *((q.question, "labelled", q.supporting) for q in lab_train)][:10]],
        })

    def _embed(self) -> None:
        """The corpus's chunk vectors into the cache, a slice at a time, saved after each (resumable)."""
        texts = [t for t in dict.fromkeys(self.corpus.texts) if t not in self.cache]
        precision, _ = choose_precision("auto", self.start.device)
        with tqdm(total=len(self.corpus.texts), initial=len(self.corpus.texts) - len(texts), unit="passage",
                  desc="embedding the corpus", file=sys.stderr) as bar:
            for at in range(0, len(texts), EMBED_SLICE):
                part = texts[at : at + EMBED_SLICE]
                with torch.no_grad(), precision_autocast(self.start.device, precision):
                    self.cache.vectors(self.start, part)
                self.vector_folder.save()
                bar.update(len(part))
        self.record.facts["embed_precision"] = precision

    def _held_out_questions(self) -> list[tuple[str, list[str]]]:
        """The held-out questions the choice scores (the labelled ones when there are any)."""
        rows = _rows(self.folder.work / "val.jsonl")
        labelled = [r for r in rows if r.get("kind") == "labelled"]
        return [(r["question"], list(r["supporting"])) for r in (labelled or rows)]

    def _start_validation(self) -> list[Episode]:
        """The start's own validation episodes, or none (another start, or its data not installed)."""
        name = next((n for n in START_DATA if _same_checkpoint(n, self.options.init)), None)
        if name is None:
            self.record.facts["start_data"] = None
            return []
        from qrag.training.data.hotpot_pool import iter_hotpot_pool

        try:
            episodes = list(itertools.islice(iter_hotpot_pool(split="val", num_distractors=8, negatives="bm25",
                                                              neighbours=pool_neighbours), START_ROWS))
        except FileNotFoundError as e:
            print(f"qrag-adapt: the start's validation data is not installed ({e}); the choice cannot guard what it "
                  "knew.", file=sys.stderr)
            self.record.facts["start_data"] = None
            return []
        self.record.facts["start_data"] = f"{START_DATA[name]} validation rows, {len(episodes)} questions"
        return episodes

    def _score(self, net: QNetwork, weight: float) -> dict[str, Any]:
        """A candidate's scores: held-out recall@CHOICE_K at each horizon tried, searched with the stop threshold
        calibrated for the candidate at that horizon (what it would ship with; `held_out_scores`), and on the start's
        own data."""
        held = held_out_scores(net, self.index, self.held_out, self.horizons())
        out: dict[str, Any] = {"weight": weight,
                               "held_out": {str(h): statistics.fmean(v) for h, v in held.recalls.items()},
                               "held_out_se": {str(h): standard_error(v) for h, v in held.recalls.items()},
                               "per_question": {str(h): v for h, v in held.recalls.items()},
                               "stop_threshold": {str(h): t for h, t in held.thresholds.items()}}
        if self.start_val:
            env = EnvConfig(max_hops=START_HOPS)
            out["start_score"] = evaluate(net, self.start_val, env, 16, 64, self.cache)["fact_recall"]
        return out

    def horizons(self) -> list[int]:
        """The horizons tried: the start's, the one trained (the questions' median), and one hop per result."""
        return sorted({self.start_horizon, int(self.record.facts["horizon"]), min(MAX_HORIZON, CHOICE_K)})

    def train_config(self, run: Path) -> TrainConfig:
        """The fine-tune's settings (the `corpus-cpu` preset on this run's questions, from the start), writing to `run`."""
        o, facts = self.options, self.record.facts
        config = load_preset(PRESET)
        config.model = self.model_config
        config.env.max_hops = int(facts["horizon"])
        config.data.corpus = str(Path(o.corpus).expanduser().resolve())
        config.data.train_path = str(self.folder.work / "train.jsonl")
        config.data.val_path = str(self.folder.work / "val.jsonl")
        config.trainer.output_dir = str(run)
        config.trainer.seed = o.seed
        config.trainer.threads = o.threads or torch.get_num_threads()
        config.trainer.resume = (run / "last").is_dir()
        config.optim.warmup_steps, config.optim.lr = WARMUP_UPDATES, LEARNING_RATE
        if o.train_layers is not None:
            config.trainer.train_layers = o.train_layers
        if config.trainer.train_layers:  # a start whose state tower cannot be split trains every layer instead
            try:
                if not takes_train_layers(config.model):
                    raise ConfigError(f"train_towers {config.model.train_towers!r}, train_mode "
                                      f"{config.model.train_mode!r}, state_anchor {config.model.state_anchor!r}")
                check_splittable(self.start.state_tower.encoder, config.trainer.train_layers, "trainer.train_layers")
            except ConfigError as e:
                print(f"qrag-adapt: every layer of the start's state tower trains ({e})", file=sys.stderr)
                config.trainer.train_layers = 0
        return config

    def training_episodes(self) -> list[Episode]:
        """The training episodes: the built and labelled questions', and the start's own rehearsed."""
        train = self._corpus_episodes("train.jsonl", "train")
        ids = {r["id"] for r in _rows(self.folder.work / "train.jsonl") if r.get("kind") == "labelled"}
        labelled = [ep for ep in train if ep.id in ids]
        repeats = labelled_repeats(len(labelled), len(train) - len(labelled), LABELLED_SHARE)
        train += labelled * (repeats - 1)  # the same episodes again: uniform draws then find them at least that share
        rehearsed = self._rehearsal(len(train))
        self.record.facts.update({"rehearsed": len(rehearsed), "labelled_repeats": repeats})
        return train + rehearsed

    def _train(self) -> None:
        o, facts = self.options, self.record.facts
        run = self.folder.work / "run"
        config = self.train_config(run)
        train = self.training_episodes()
        # the choice scores every blend as the start was scored (its stop rule calibrated first) and saves one
        if "weights" not in facts:  # sized once, by what scoring the start measured on this machine
            facts["weights"] = blend_weights(float(facts["score_seconds"]), 60 * o.minutes)
        reserve = CHOICE_MARGIN * float(facts["score_seconds"]) * len(facts["weights"]) + 30
        minutes = (self._left() - reserve) / 60  # the trainer's own set-up counts in its budget
        if minutes < 1:
            raise AdaptError(f"--minutes {o.minutes:g} leaves {max(0.0, minutes):.1f} minutes to train after the set-up "
                             f"({self.record.spent / 60:.1f} minutes so far) and the choice; pass more minutes (the run "
                             "goes on from here).")
        config.trainer.max_minutes = minutes
        from qrag.training.learn.trainer import Trainer

        facts["train_layers"] = config.trainer.train_layers
        # no validation inside the run: the choice scores the fine-tune (and its blends, and the start) on the held-out
        # questions afterwards, so the minutes it would take train instead
        trainer = Trainer(config.validate(), train, chunk_cache=self.cache)
        print(f"qrag-adapt: training {minutes:.1f} minutes on {len(train)} episodes ({facts['rehearsed']} rehearsed)",
              file=sys.stderr)
        summary = trainer.train()
        facts["train"] = {k: v for k, v in summary.items() if isinstance(v, (int, float, str))}
        if int(summary["updates"]) < FEW_UPDATES:
            print(f"qrag-adapt: training made {summary['updates']} updates ({summary['transitions']} transitions) in "
                  f"{minutes:.1f} minutes, too few to change much: the fine-tune stays close to the start. Give it more "
                  "--minutes, or a faster machine.", file=sys.stderr)

    def _corpus_episodes(self, name: str, split: str) -> list[Episode]:
        """The questions of work/NAME as episodes: each with 100 negatives of the corpus, found with the cached
        vectors (`qrag.training.data.negatives`)."""
        print(f"qrag-adapt: hard negatives for the questions of {name}", file=sys.stderr)
        return list(iter_corpus(self.folder.work / name, corpus=self.options.corpus, num_distractors=NEGATIVES,
                                seed=self.options.seed, split=split, neighbours=self._neighbours))

    def _neighbours(self, passages: Sequence[str], vectors: torch.Tensor | None, what: str) -> Any:
        """The corpus's neighbour lookup (`NeighbourSearch`), adopting the cached vectors when its encoder is the chunk
        tower; one bound method for the run, so the corpus source builds the lookup (and its BM25) once."""
        near = pool_neighbours(passages, vectors, what)
        if vectors is None and len(passages) == len(self.corpus.texts):
            near.adopt(self.vectors, self.cache.key)
        return near

    def _rehearsal(self, own: int) -> list[Episode]:
        """The start's own training questions (distractor setting), `REHEARSE_SHARE` of the training set."""
        if not self.start_val:
            return []
        from qrag.training.data.hotpot_pool import iter_hotpot_pool

        want = round(own * REHEARSE_SHARE / (1 - REHEARSE_SHARE))
        return list(itertools.islice(iter_hotpot_pool(split="train", num_distractors=8, negatives="bm25",
                                                      neighbours=pool_neighbours), want))

    def _choose(self) -> None:
        facts, run = self.record.facts, self.folder.work / "run"
        # the run's last network (it validates nothing itself: the choice below scores it against the start)
        tuned_dir = run / "last" / MODEL_DIR
        if not tuned_dir.is_dir():
            raise AdaptError(f"the training run {str(run)!r} saved no checkpoint; run qrag-adapt again with more "
                             "--minutes (it goes on from here).")
        tuned = QNetwork.from_pretrained(tuned_dir).eval()
        rows = [facts["start"]]
        for w in tqdm(facts.get("weights", WEIGHTS), desc="scoring blends", unit="blend", file=sys.stderr):
            rows.append(self._score(self._blend(tuned, w), w))
        candidates = [Candidate(r["weight"], int(h), float(v), r.get("start_score"),
                                float(r.get("held_out_se", {}).get(h, 0.0)), tuple(r.get("per_question", {}).get(h, ())),
                                r.get("stop_threshold", {}).get(h))
                      for r in rows for h, v in r["held_out"].items()]
        best, why = choose(candidates)
        net = self._blend(tuned, best.weight) if best.weight else copy.deepcopy(self.start)  # the start stays as it was
        net.config = dataclasses.replace(net.config, init=self.options.init)
        threshold = best.stop_threshold
        if threshold is None:  # a run resumed from a version that scored the start with its own threshold
            threshold = held_out_scores(net, self.index, self.held_out, [best.horizon]).thresholds[best.horizon]
        # shipped with the threshold it was scored with
        net.hop_settings = dataclasses.replace(net.hop_settings, max_hops=best.horizon, stop_threshold=float(threshold),
                                               calibrated=True)
        facts["candidates"] = [{k: v for k, v in dataclasses.asdict(c).items() if k != "per_question"}
                               for c in candidates]
        facts["choice"] = {"weight": best.weight, "horizon": best.horizon, "why": why, "tuned": "last"}
        extra = {"adapt.json": json.dumps(facts["choice"], indent=1)}
        net.save_pretrained(self.folder.model, extra_files=extra)
        # the corpus's vectors go with it: the user's retriever loads them instead of embedding the corpus again
        MultiHopSearcher(net, self.index, SearchConfig()).save(self.folder.searcher, extra_files=extra)

    def _blend(self, tuned: QNetwork, weight: float) -> QNetwork:
        if weight == 0:
            return self.start
        net = tuned if weight == 1 else blend_networks(self.start, tuned, weight)
        net.config = dataclasses.replace(net.config, init=self.options.init)
        return net.eval()


def labelled_repeats(labelled: int, built: int, share: float = LABELLED_SHARE) -> int:
    """How many times each labelled question trains so that the `labelled` of them make at least `share` of the
    episodes beside `built` others (once each when they already do, or there are none)."""
    if labelled == 0 or labelled >= share * (labelled + built):
        return 1
    return math.ceil(share * built / ((1 - share) * labelled))


def _rows(path: Path) -> list[dict[str, Any]]:
    """The questions of one of the run's JSON Lines files (work/train.jsonl, work/val.jsonl)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def blend_weights(score_seconds: float, budget_seconds: float) -> tuple[float, ...]:
    """The blend weights the choice scores: `PREFERRED_WEIGHTS`, in order, while their scoring (`CHOICE_MARGIN` times
    the start's measured `score_seconds` each) fits in `CHOICE_SHARE` of the budget; at least the fine-tune (w = 1)."""
    fit = int(CHOICE_SHARE * budget_seconds // max(1e-9, CHOICE_MARGIN * score_seconds))
    return tuple(sorted(PREFERRED_WEIGHTS[: max(1, min(len(PREFERRED_WEIGHTS), fit))]))


@dataclasses.dataclass(frozen=True)
class HeldOutScores:
    """The held-out questions searched as a user searches: per horizon, the stop threshold calibrated on them and
    each question's recall with it."""

    recalls: dict[int, list[float]]
    thresholds: dict[int, float]


def held_out_scores(net: QNetwork, index: ChunkIndex, questions: Sequence[tuple[str, list[str]]],
                    horizons: Sequence[int], k: int = CHOICE_K) -> HeldOutScores:
    """Per horizon h, the stop threshold of `net` calibrated at h on these questions over the whole corpus (METHOD.md
    §4.3: its hops' Q-values and passages, `choose_threshold`), and each question's share of its supporting passages
    among the `k` results of the model's own search (its lexical weight and fill) with h hops and that threshold.

    The hops of the longest horizon are searched once without a stop rule: the greedy hops of every shorter horizon
    and threshold are their first ones (under the guard, fill 'question', its own cut included). A model that fills
    past its hops from the question's own ranking ('question', 'question_unguarded') is searched once more for that
    ranking (one hop, `k` results): each horizon's results are its hops, then that ranking without them, what its own
    search returns. A model that fills from the state after its last hop ('state') is searched once per horizon.
    """
    searcher = MultiHopSearcher(net, index, SearchConfig(k=k))
    asked, gold = [q for q, _ in questions], [list(g) for _, g in questions]
    fill = net.hop_settings.fill
    with torch.no_grad():
        chains = [sorted((x for x in r.hits if not x.past_stop), key=lambda x: x.hop)
                  for r in searcher.search(asked, max_hops=max(horizons), stop_threshold=None)]
        hops = [[x.chunk.id for x in c] for c in chains]
        q_values = [[float(x.q_value) for x in c] for c in chains]
        rows = {name: i for i, name in enumerate(dict.fromkeys([i for c in hops for i in c] + [i for g in gold for i in g]))}
        thresholds = {h: float(choose_threshold([q[:h] for q in q_values], [[rows[i] for i in c[:h]] for c in hops],
                                                [[rows[i] for i in g] for g in gold])[0]) for h in horizons}
        if fill == "state":
            found = {h: [[x.chunk.id for x in r.hits] for r in searcher.search(asked, max_hops=h)] for h in horizons}
        else:
            ranked = [[x.chunk.id for x in r.hits] for r in searcher.search(asked, max_hops=1, k=k)]
            found = {}
            for h in horizons:
                kept = [c[: stop_point(q[:h], thresholds[h], 1)] if fill == "question" else c[:h]
                        for c, q in zip(hops, q_values, strict=True)]
                found[h] = [c + [i for i in r if i not in c][: k - len(c)] for c, r in zip(kept, ranked, strict=True)]
    recalls = {h: [len(set(f) & set(g)) / len(g) for f, g in zip(found[h], gold, strict=True)] for h in horizons}
    return HeldOutScores(recalls, thresholds)


def _same_checkpoint(a: str, b: str) -> bool:
    try:
        return resolve_checkpoint(a).resolve() == resolve_checkpoint(b).resolve()
    except (OSError, ValueError):
        return False
