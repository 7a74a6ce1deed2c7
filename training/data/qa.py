"""Loaders for multi-hop QA in the distractor setting, and the corpus form of the custom format.

Mapping to episodes (BENCHMARKS.md §4):

- HotpotQA / 2WikiMultihopQA (same schema): one chunk per context paragraph, "{title}. {sentences joined}";
  `supporting` = the paragraphs whose title occurs in `supporting_facts`. Both the official JSON (a list of
  records with `context: [[title, [sentences]]]`) and the hub layout (`context: {title: [...], sentences:
  [[...]]}`) are read; a `.jsonl` file holds one record per line.
- MuSiQue (JSON Lines): one chunk per paragraph, "{title}. {paragraph_text}"; `supporting` = the paragraphs
  named by `question_decomposition[*].paragraph_support_idx`. Unanswerable records (MuSiQue-Full) are skipped.

Custom corpus form (BENCHMARKS.md §5), JSON Lines mixing two kinds of lines:

    {"passage_id": "p1", "text": "...", "title": "..."}          # title optional
    {"id": "q1", "question": "...", "supporting_ids": ["p1"], "answer": "..."}

Every question's chunks are all passages in file order (one shared tuple). Errors name file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from qrag.training.data.episode import (
    Episode,
    EpisodeError,
    iter_json_lines,
    iter_jsonl,
    open_utf8,
    read_utf8,
)

QAKind = Literal["hotpotqa", "2wiki", "musique"]
QA_KINDS: tuple[QAKind, ...] = get_args(QAKind)


def _chunk(title: str, text: str) -> str:
    return f"{title}. {text}" if title else text


def hotpot_paragraphs(rec: Any, *, where: str) -> tuple[list[str], list[str], list[int]]:
    """Titles, texts and supporting paragraph positions of a HotpotQA/2Wiki record (either layout).

    Raises:
        EpisodeError: not a HotpotQA-schema record, or a supporting title missing from the paragraphs.
    """
    if not isinstance(rec, Mapping):
        raise EpisodeError(f"{where}: expected a JSON object, got {type(rec).__name__}.")
    missing = [k for k in ("question", "context") if k not in rec]
    if missing:
        raise EpisodeError(
            f"{where}: not a HotpotQA-schema record, missing key(s) {missing} (has {sorted(rec)[:8]})."
        )
    ctx = rec["context"]
    if isinstance(ctx, Mapping):  # hub layout
        pairs = list(zip(ctx.get("title", []), ctx.get("sentences", []), strict=False))
    elif isinstance(ctx, list) and all(isinstance(c, list) and len(c) == 2 for c in ctx):
        pairs = [(c[0], c[1]) for c in ctx]
    else:
        raise EpisodeError(f"{where}: 'context' must be [[title, [sentences]], ...] or {{title, sentences}}.")
    if not pairs:
        raise EpisodeError(f"{where}: 'context' holds no paragraphs.")
    titles = [str(t) for t, _ in pairs]
    texts = ["".join(s).strip() if isinstance(s, list) else str(s).strip() for _, s in pairs]
    sf = rec.get("supporting_facts", [])
    sf_titles = list(sf.get("title", [])) if isinstance(sf, Mapping) else [f[0] for f in sf]
    known = set(titles)
    for t in sf_titles:
        if t not in known:
            raise EpisodeError(
                f"{where}: supporting title {t!r} is not among the paragraphs' titles {titles}."
            )
    gold = sorted({i for i, t in enumerate(titles) if t in set(sf_titles)})
    return titles, texts, gold


def hotpot_episode(rec: Any, *, where: str, kind: QAKind = "hotpotqa", id: str = "") -> Episode:
    """A HotpotQA/2Wiki record as an episode (see the module docstring)."""
    titles, texts, gold = hotpot_paragraphs(rec, where=where)
    chunks = [_chunk(t, x) for t, x in zip(titles, texts, strict=True)]
    answer = rec.get("answer")
    meta = {"source": kind, "type": rec.get("type"), "level": rec.get("level")}
    meta = {k: v for k, v in meta.items() if v is not None}
    eid = str(rec.get("_id", rec.get("id", ""))) or id
    return Episode(str(rec["question"]), tuple(chunks), tuple(gold), None if answer is None else str(answer), eid, meta)


def musique_episode(rec: Any, *, where: str, id: str = "") -> Episode | None:
    """A MuSiQue record as an episode; None for an unanswerable (MuSiQue-Full) record.

    Raises:
        EpisodeError: not a MuSiQue record, or a `paragraph_support_idx` that names no paragraph.
    """
    if not isinstance(rec, Mapping):
        raise EpisodeError(f"{where}: expected a JSON object, got {type(rec).__name__}.")
    missing = [k for k in ("question", "paragraphs", "question_decomposition") if k not in rec]
    if missing:
        raise EpisodeError(f"{where}: not a MuSiQue record, missing key(s) {missing} (has {sorted(rec)[:8]}).")
    if rec.get("answerable") is False:
        return None
    paras = rec["paragraphs"]
    pos = {}
    for j, p in enumerate(paras):
        if not isinstance(p, Mapping) or "paragraph_text" not in p:
            raise EpisodeError(f"{where}: paragraphs[{j}] lacks 'paragraph_text' (MuSiQue schema).")
        pos[p.get("idx", j)] = j
    gold: set[int] = set()
    for step in rec["question_decomposition"]:
        idx = step.get("paragraph_support_idx") if isinstance(step, Mapping) else None
        if idx is None:
            continue
        if idx not in pos:
            raise EpisodeError(f"{where}: paragraph_support_idx {idx!r} names no paragraph (idx {sorted(pos)}).")
        gold.add(pos[idx])
    chunks = [_chunk(str(p.get("title", "")), str(p["paragraph_text"]).strip()) for p in paras]
    meta = {"source": "musique", "answer_aliases": list(rec.get("answer_aliases", []))}
    answer = rec.get("answer")
    eid = str(rec.get("id", "")) or id
    return Episode(str(rec["question"]), tuple(chunks), tuple(sorted(gold)), None if answer is None else str(answer), eid, meta)


def _records(path: Path) -> Iterator[tuple[Any, str]]:
    """(record, where) for a JSON list file or a JSON Lines file; `where` is 'file:line' or 'file: record i'."""
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} does not exist (or is not a file).")
    if path.suffix == ".jsonl":
        for _, where, rec in iter_json_lines(path, "data file"):
            yield rec, where
        return
    try:
        data = json.loads(read_utf8(path))
    except json.JSONDecodeError as e:
        raise EpisodeError(f"{path}:{e.lineno}: malformed JSON ({e.msg}).") from None
    if not isinstance(data, list):
        keys = sorted(data)[:6] if isinstance(data, dict) else type(data).__name__
        raise EpisodeError(f"{path}: expected a JSON list of records (or a .jsonl file), got an object {keys}.")
    for i, rec in enumerate(data):
        yield rec, f"{path}: record {i}"


def iter_qa_file(kind: QAKind, path: str | Path) -> Iterator[Episode]:
    """Stream episodes from a local HotpotQA / 2Wiki (JSON or JSON Lines) or MuSiQue (JSON Lines) file."""
    if kind not in QA_KINDS:
        raise ValueError(f"unknown QA data set {kind!r}; valid: {', '.join(QA_KINDS)}.")
    p = Path(path)
    for n, (rec, where) in enumerate(_records(p)):
        if kind == "musique":
            ep = musique_episode(rec, where=where, id=f"{p.stem}-{n}")
            if ep is not None:
                yield ep
        else:
            yield hotpot_episode(rec, where=where, kind=kind, id=f"{p.stem}-{n}")


def load_qa_hub(kind: QAKind, hub_id: str, split: str = "validation", config: str | None = None) -> list[Episode]:
    """Read a QA set through `datasets` (optional extra, network needed), e.g. ("hotpotqa", "hotpot_qa", ..., "distractor")."""
    try:
        import datasets
    except ImportError:
        raise ImportError(f"loading {hub_id!r} from the hub needs `datasets`: pip install 'qrag[datasets]'") from None
    ds = datasets.load_dataset(hub_id, config, split=split)
    out: list[Episode] = []
    for i, rec in enumerate(ds):
        where = f"{hub_id}[{i}]"
        if kind == "musique":
            ep = musique_episode(dict(rec), where=where, id=where)
            if ep is not None:
                out.append(ep)
        else:
            out.append(hotpot_episode(dict(rec), where=where, kind=kind, id=where))
    return out


# --- custom format, corpus form --------------------------------------------------------------------------


def _is_corpus_file(path: Path) -> bool:
    with open_utf8(path) as f:
        for line in f:
            if line.strip():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    return False  # let the per-episode reader report the line
                return isinstance(rec, dict) and "passage_id" in rec
    return False


def read_corpus_jsonl(path: str | Path) -> list[Episode]:
    """Read the corpus form: passage lines and question lines (see the module docstring).

    Raises:
        FileNotFoundError: no such file.
        EpisodeError: a malformed line, a repeated passage id, or a supporting id naming no passage.
    """
    p = Path(path)
    passages: dict[str, int] = {}
    texts: list[str] = []
    questions: list[tuple[dict[str, Any], str]] = []
    for _, where, rec in iter_json_lines(p, "corpus file"):
        if not isinstance(rec, dict):
            raise EpisodeError(f"{where}: expected a JSON object, got {type(rec).__name__}.")
        if "passage_id" in rec:
            pid, text = str(rec["passage_id"]), rec.get("text")
            if not isinstance(text, str) or not text.strip():
                raise EpisodeError(f"{where}: passage {pid!r} needs a non-empty 'text'.")
            if pid in passages:
                raise EpisodeError(f"{where}: passage id {pid!r} repeats (first at passage {passages[pid]}).")
            passages[pid] = len(texts)
            texts.append(_chunk(str(rec.get("title") or ""), text.strip()))
        elif "question" in rec:
            ids = rec.get("supporting_ids", [])
            if not isinstance(ids, list):
                raise EpisodeError(f"{where}: 'supporting_ids' must be a list of passage ids, got {ids!r}.")
            questions.append((rec, where))
        else:
            raise EpisodeError(f"{where}: a line needs 'passage_id' (a passage) or 'question' (a question).")
    chunks = tuple(texts)
    out: list[Episode] = []
    for rec, where in questions:
        bad = [i for i in rec.get("supporting_ids", []) if str(i) not in passages]
        if bad:
            raise EpisodeError(f"{where}: supporting id {bad[0]!r} names no passage of the file.")
        support = tuple(sorted({passages[str(i)] for i in rec.get("supporting_ids", [])}))
        answer = rec.get("answer")
        try:
            out.append(Episode(str(rec["question"]), chunks, support, None if answer is None else str(answer),
                               str(rec.get("id") or where.rsplit(":", 1)[-1]), {"source": "jsonl-corpus"}))
        except EpisodeError as e:
            raise EpisodeError(f"{where}: {e}") from None
    return out


def iter_custom_jsonl(path: str | Path) -> Iterator[Episode]:
    """Episodes from a custom-format file in either form (corpus form when its first line is a passage)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"episode file {str(p)!r} does not exist (or is not a file).")
    if _is_corpus_file(p):
        yield from read_corpus_jsonl(p)
    else:
        yield from iter_jsonl(p)
