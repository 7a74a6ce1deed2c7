"""`qrag-adapt`: teach a shipped model a corpus, without labelled questions, in one command.

    qrag-adapt --corpus my_passages.jsonl --out runs/mine                       # no labels: questions built from it
    qrag-adapt --corpus docs/ --out runs/mine --questions my_questions.jsonl    # a team's labelled questions
    qrag-adapt --corpus my_passages.jsonl --out runs/mine --minutes 60         # a longer budget

Writes DIR/model (a model folder: `QRAGRetriever.from_texts(texts, model="DIR/model")`, `qrag-eval --model
DIR/model`) and DIR/report.md (the questions it made, the validation table, what it chose and why, the time of each
phase). The whole run, set-up included, keeps within --minutes; stopped, the same command goes on where it was.
Passages: one {"id", "text"} (and optionally "title") per line, or a folder of .txt / .md files; questions: qrag's
{"question", "supporting": [passage ids]} per line, LlamaIndex's EmbeddingQAFinetuneDataset JSON, sentence-transformers'
IR triple (queries, corpus, relevant_docs), a CSV of question and passage_id, or {"question", "answer"} lines (weak
labels: the passages holding the answer; `qrag.training.data.label_formats`). A malformed file is refused, naming its
line and field, before anything trains. No language model is called, at training or at search.

With labelled questions, they train alone (no questions are built: `--max-questions N` adds N built ones) and every
layer of the state tower trains (`--train-layers`): on FanOutQA's dev questions by folds, that recipe found more of
held-out questions' passages than built questions beside them with the top layer alone (docs/RESULTS.md, "Your own
corpus"). Without labels, up to 4 000 questions are built and the top layer trains.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from qrag.training.data.evaluation_only import EvaluationOnlyError, refuse_evaluation_only
from qrag.training.input_checks import one_line


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="qrag-adapt", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="the passages: a JSON Lines file or a folder of .txt/.md files")
    ap.add_argument("--out", required=True, help="a new or empty folder (or this command's earlier run, to go on)")
    ap.add_argument("--questions", help="labelled questions over the corpus (qrag's .jsonl, LlamaIndex's or "
                    "sentence-transformers' .json, .csv of question,passage_id); they train alone unless "
                    "--max-questions builds some beside them")
    ap.add_argument("--init", default="qrag/hotpotqa-minilm", help="the model to start from (default: %(default)s)")
    ap.add_argument("--minutes", type=float, default=30.0, help="the whole run's budget, set-up included (%(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the questions and the training (%(default)s)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    ap.add_argument("--max-questions", type=int, default=None,
                    help="most questions built from the corpus (default: 4000 without --questions, 0 with them)")
    ap.add_argument("--train-layers", type=int, default=None,
                    help="top layers of the state tower that train (0: every layer; default: 0 with --questions, "
                    "else the corpus-cpu preset's 1)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0 ok, 2 bad arguments or input)."""
    args = _parser().parse_args(argv)
    try:  # before the model libraries load
        refuse_evaluation_only(args.questions, "--questions",
                               "Give your own labelled questions over the corpus, or none (the questions built from "
                               "it train and choose alone)")
    except (EvaluationOnlyError, OSError) as e:
        print(f"qrag-adapt: error: {one_line(e)}", file=sys.stderr)
        return 2
    if args.threads is not None and args.threads < 1:
        print(f"qrag-adapt: error: --threads must be >= 1, got {args.threads}.", file=sys.stderr)
        return 2
    if args.train_layers is not None and args.train_layers < 0:
        print(f"qrag-adapt: error: --train-layers must be >= 0 (0: every layer), got {args.train_layers}.",
              file=sys.stderr)
        return 2
    from qrag.training.data import EpisodeError
    from qrag.training.learn.adapt.folder import MAX_QUESTIONS, AdaptOptions
    from qrag.training.learn.adapt.run import Adapt
    from qrag.training.learn.checkpoint_files import ResumeError
    from qrag.training.model.encoders import EncoderLoadError
    from qrag.training.model.qnet import CheckpointError
    from qrag.training.overlay import ConfigError

    options = AdaptOptions(corpus=args.corpus, out=args.out, questions=args.questions, init=args.init,
                           minutes=args.minutes, seed=args.seed, threads=args.threads,
                           max_questions=(0 if args.questions else MAX_QUESTIONS) if args.max_questions is None
                           else args.max_questions,
                           train_layers=(0 if args.questions else None) if args.train_layers is None
                           else args.train_layers)
    run = Adapt(options)
    try:
        run.prepare()
        done = run.folder.report.is_file() and run.folder.model.is_dir()
        model = run.folder.model if done else run.run()
    except (ConfigError, EpisodeError, EncoderLoadError, CheckpointError, ResumeError, OSError, ValueError) as e:
        print(f"qrag-adapt: error: {one_line(e)}", file=sys.stderr)
        return 2
    print(f"qrag-adapt: {'already done: ' if done else ''}the model is {model}, the report {run.folder.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
