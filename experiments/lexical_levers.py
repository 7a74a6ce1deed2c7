"""Which lexical evidence lets a HotpotQA-trained model beat BM25 + cosine fused by reciprocal rank (the hybrid)?

For each question of a validation set this records, once, every score the candidate searches decide from: the
base encoder's cosine of the question, BM25 of the question (bm25s, English stop words), the model's Q-values
at the first hop, and, for each passage some candidate takes first, the Q-values after it and BM25 of the
question plus that passage. The searches are then simulated on those signals, so every candidate is scored on
the same questions:

- hop 1 ranks by Q, or by Q fused with BM25 of the question (reciprocal ranks with weight w, or Q + w·BM25/max);
- hop 2 ranks by Q after hop 1, fused the same way with BM25 of the question or of the question + hop 1's text;
- the guard refuses hop 2 where its Q-value is below t; the results past the hops come from cosine, the hybrid
  (cosine and BM25 of the question, reciprocal ranks, c = 60), or hop 1's own fused ranking.

Validation data only (HotpotQA val rows 8 500-8 999 over their pool; the wiki source's val pages); nothing here
reads a test split or FanOutQA.

    python experiments/lexical_levers.py record qrag/hotpotqa-minilm --signals runs/lexical/signals.npz
    python experiments/lexical_levers.py simulate --signals runs/lexical/signals.npz --out experiments/results/lexical_levers.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from hop_guard import ranked  # experiments/hop_guard.py: the items taken, then a ranking's next ones

from qrag.training.data.hotpot_pool import iter_hotpot_pool
from qrag.training.data.wiki import DEFAULT_DISTRACTORS, iter_wiki
from qrag.training.search import hops
from qrag.training.search.searcher import load_model

RRF_C = 60
KEEP = 10  # results per question the simulated searches rank (hop_guard's)
WIKI_K = {"single": 2, "mix": 2, "fanout": 4, "category": 4, "inlink": 4}  # each off-domain set at its k
WEIGHTS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.5)


# --- recording ---------------------------------------------------------------------------------------------

_INDEXES: dict[int, tuple[Sequence[str], object]] = {}


def bm25_scores(corpus: Sequence[str], queries: Sequence[str]) -> np.ndarray:
    """(Q, N) BM25 scores of every query over `corpus` (bm25s, English stop words, the eval baseline's); the
    index of the last few corpora is kept."""
    import bm25s

    held = _INDEXES.get(id(corpus))
    if held is None or held[0] is not corpus:
        index = bm25s.BM25()
        index.index(bm25s.tokenize(list(corpus), stopwords="en", show_progress=False), show_progress=False)
        if len(_INDEXES) > 8:
            _INDEXES.clear()
        _INDEXES[id(corpus)] = (corpus, index)
    index = _INDEXES[id(corpus)][1]
    tokens = bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
    out = np.zeros((len(queries), len(corpus)), dtype=np.float32)
    for i, toks in enumerate(tokens):
        if toks:
            out[i] = index.get_scores(list(toks))  # type: ignore[attr-defined]
    return out


def rrf(*ranked: tuple[np.ndarray, float]) -> np.ndarray:
    """Reciprocal-rank fusion of (scores (N,), weight) pairs: Σ w / (c + rank), rank 1-based; -inf stays last."""
    total = np.zeros(ranked[0][0].shape[-1])
    for scores, w in ranked:
        order = np.argsort(-scores, kind="stable")
        rank = np.empty(len(scores))
        rank[order] = np.arange(1, len(scores) + 1)
        total += w / (RRF_C + rank)
    total[np.isneginf(ranked[0][0])] = -np.inf
    return total


HOP1: dict[str, Callable[[dict], np.ndarray]] = {"q": lambda s: s["q0"]}
for _w in (0.25, 0.5, 1.0, 2.0):
    HOP1[f"rrf{_w}"] = (lambda w: lambda s: rrf((s["q0"], 1.0), (s["bm25"], w)))(_w)
for _w in WEIGHTS:
    HOP1[f"add{_w}"] = (lambda w: lambda s: s["q0"] + w * s["bm25n"])(_w)
HOP1["hybrid"] = lambda s: rrf((s["cos"], 1.0), (s["bm25"], 1.0))
HOP1["rrf3"] = lambda s: rrf((s["q0"], 1.0), (s["cos"], 1.0), (s["bm25"], 1.0))


SETS = ("hotpotqa_val", *(f"wiki_{kind}_val" for kind in WIKI_K), "wiki_fanout_pool", "wiki_mix_pool")
"""The validation sets: HotpotQA val over its pool; the wiki source's val questions with 30 other pages each
(`_val`) or with every val page (`_pool`, a corpus like FanOutQA's)."""


def record(model_name: str, signals: Path, names: Sequence[str], wiki_samples: int) -> None:
    """Record the signals of the sets `names` into `signals` (kept sets of an earlier run stay)."""
    model = load_model(model_name, precision="bf16")
    start = time.time()
    sets: dict[str, list[dict]] = load_signals(signals) if signals.is_file() else {}
    cache: dict[str, torch.Tensor] = {}

    def embed(texts: Sequence[str]) -> torch.Tensor:
        new = [t for t in dict.fromkeys(texts) if t not in cache]
        if new:
            for t, v in zip(new, model.embed_chunks(new, precision="bf16"), strict=True):
                cache[t] = v
        return torch.stack([cache[t] for t in texts])  # (N, D)

    for name in names:
        if name == "hotpotqa_val":
            hp = list(iter_hotpot_pool(split="val"))
            pool = hp[0].chunks
            vectors = embed(pool)
            bm = bm25_scores(pool, [ep.question for ep in hp])
            sets[name] = record_set(model, hp, [vectors] * len(hp), lambda i, eps, bm=bm: bm[i],
                                    lambda i, eps, qs, pool=pool: bm25_scores(pool, qs))
        else:
            _, kind, which = name.split("_")
            distractors = 1000 if which == "pool" else DEFAULT_DISTRACTORS
            eps = list(itertools.islice(iter_wiki(kind, split="val", num_distractors=distractors), wiki_samples))
            sets[name] = record_set(
                model, eps, [embed(ep.chunks) for ep in eps],
                lambda i, eps: bm25_scores(eps[i].chunks, [eps[i].question])[0],
                lambda i, eps, qs: bm25_scores(eps[i].chunks, qs))
        print(f"{name} ({len(sets[name])} questions) done at {time.time() - start:.0f} s", file=sys.stderr)
    signals.parent.mkdir(parents=True, exist_ok=True)
    flat: dict[str, np.ndarray] = {}
    for name, rows in sets.items():
        for i, row in enumerate(rows):
            for key, value in row.items():
                flat[f"{name}/{i}/{key}"] = np.asarray(value)
    meta = json.dumps({name: len(rows) for name, rows in sets.items()})
    flat["__meta__"] = np.asarray(meta)
    np.savez_compressed(signals, allow_pickle=True, **flat)  # allow_pickle: numpy's default, named so no key is it


def record_set(model, episodes, vectors, bm25_of, bm25_many) -> list[dict]:
    """Per episode: gold, cos, bm25, q0 and, per first-hop candidate, q1 and bm25 of question + its text."""
    out = []
    for start in range(0, len(episodes), 32):
        group = list(range(start, min(start + 32, len(episodes))))
        questions = [episodes[i].question for i in group]
        vecs = [vectors[i] for i in group]
        if all(v is vecs[0] for v in vecs):
            corpora = hops.Corpora.shared(vecs[0], episodes[group[0]].chunks, len(group))
        else:
            corpora = hops.Corpora.padded(vecs, [episodes[i].chunks for i in group], torch.device("cpu"))
        with torch.no_grad():
            qv = model.embed_questions(questions)  # (B, D)
            q0, _ = hops.hop_scores(model, questions, corpora, list(range(len(group))), [[] for _ in group],
                                     model.config.state_order, 128)  # (B, N)
        rows = []
        for b, i in enumerate(group):
            n = len(episodes[i].chunks)
            s = {"gold": np.asarray(episodes[i].supporting), "cos": (vecs[b] @ qv[b]).float().numpy(),
                 "q0": q0[b, :n].float().numpy(), "bm25": bm25_of(i, episodes)}
            s["bm25n"] = s["bm25"] / max(float(s["bm25"].max()), 1e-9)
            s["firsts"] = np.asarray(sorted({int(np.argmax(f(s))) for f in HOP1.values()} | set(np.argsort(-s["q0"])[:2].tolist())))
            rows.append(s)
        # Second-hop signals for every first-hop candidate of every question of the group.
        pairs = [(b, int(c)) for b, s in enumerate(rows) for c in s["firsts"]]
        with torch.no_grad():
            q1, _ = hops.hop_scores(model, [questions[b] for b, _ in pairs], _expand(corpora, [b for b, _ in pairs]),
                                     list(range(len(pairs))), [[c] for _, c in pairs], model.config.state_order, 128)
        for j, (b, c) in enumerate(pairs):
            i = group[b]
            n = len(episodes[i].chunks)
            rows[b].setdefault("q1", []).append(q1[j, :n].float().numpy())
            text = episodes[i].question + " " + episodes[i].chunks[c]
            lex = bm25_many(i, episodes, [text])[0]
            rows[b].setdefault("bm25s", []).append(lex)
        for s in rows:
            s["q1"] = np.stack(s["q1"])
            s["bm25s"] = np.stack(s["bm25s"])
        out.extend(rows)
    return out


def _expand(corpora: hops.Corpora, rows: list[int]) -> hops.Corpora:
    """The corpora of question rows[r], one per state row."""
    if corpora.valid is None:
        return hops.Corpora.shared(corpora.vectors, corpora.texts[0], len(rows))
    return hops.Corpora(corpora.vectors[rows], [corpora.texts[r] for r in rows], corpora.valid[rows])


# --- simulating --------------------------------------------------------------------------------------------

def load_signals(path: Path) -> dict[str, list[dict]]:
    data = np.load(path)
    meta = json.loads(str(data["__meta__"]))
    sets: dict[str, list[dict]] = {name: [{} for _ in range(n)] for name, n in meta.items()}
    for key in data.files:
        if key == "__meta__":
            continue
        name, i, field = key.split("/")
        sets[name][int(i)][field] = data[key]
    return sets


def top(scores: np.ndarray, k: int = KEEP + 2) -> list[int]:
    """The k best rows, best first (ties by row)."""
    k = min(k, len(scores))
    part = np.argpartition(-scores, k - 1)[:k]
    return [int(i) for i in part[np.lexsort((part, -scores[part]))]]


def hop2_scores(s: dict, c1: int, how: str) -> tuple[np.ndarray, np.ndarray]:
    """(fused hop-2 scores, Q after hop 1) for first hop c1; `how` is 'q', 'rrfW:lex' or 'addW:lex'."""
    j = int(np.where(s["firsts"] == c1)[0][0])
    q1 = s["q1"][j].astype(np.float64).copy()
    q1[c1] = -np.inf
    if how == "q":
        return q1, q1
    kind, lex_name = how.split(":")
    lex = (s["bm25"] if lex_name == "question" else s["bm25s"][j]).astype(np.float64).copy()
    lex[c1] = -np.inf
    if kind.startswith("rrf"):
        return rrf((q1, 1.0), (lex, float(kind[3:]))), q1
    fused = q1 + float(kind[3:]) * np.maximum(lex, 0) / max(float(lex.max()), 1e-9)
    fused[c1] = -np.inf
    return fused, q1


FILLS: dict[str, Callable[[dict], np.ndarray]] = {
    "cos": lambda s: s["cos"],
    "hybrid": lambda s: rrf((s["cos"], 1.0), (s["bm25"], 1.0)),
    "rrf3": lambda s: rrf((s["q0"], 1.0), (s["cos"], 1.0), (s["bm25"], 1.0)),
}


class Simulator:
    """The searches of one row, each piece computed once."""

    def __init__(self, s: dict) -> None:
        self.s = s
        self._hop1: dict[str, list[int]] = {}
        self._hop2: dict[tuple[int, str], tuple[int, float]] = {}
        self._fill: dict[str, list[int]] = {}

    def hop1(self, name: str) -> list[int]:
        if name not in self._hop1:
            self._hop1[name] = top(HOP1[name](self.s))
        return self._hop1[name]

    def hop2(self, c1: int, how: str) -> tuple[int, float]:
        if (c1, how) not in self._hop2:
            fused, q1 = hop2_scores(self.s, c1, how)
            c2 = int(np.argmax(fused))
            self._hop2[(c1, how)] = (c2, float(q1[c2]))
        return self._hop2[(c1, how)]

    def fill(self, name: str) -> list[int]:
        if name not in self._fill:
            self._fill[name] = top(FILLS[name](self.s))
        return self._fill[name]

    def search(self, hop1: str, hop2: str, threshold: float | None, fill: str) -> list[int]:
        r1 = self.hop1(hop1)
        c1 = r1[0]
        c2, q2 = self.hop2(c1, hop2)
        taken = [c1] if threshold is not None and q2 < threshold else [c1, c2]
        return ranked(taken, r1 if fill == "hop1" else self.fill(fill))


def recall(hits: list[int], gold: np.ndarray, k: int) -> float:
    return len(set(hits[:k]) & set(gold.tolist())) / len(gold)


def metrics(sets: dict[str, list[dict]], lists: dict[str, list[list[int]]]) -> dict[str, dict[str, float]]:
    out = {}
    for name, rows in sets.items():
        hits = lists[name]
        m = {f"recall@{k}": float(np.mean([recall(h, r["gold"], k) for h, r in zip(hits, rows, strict=True)]))
             for k in (2, 4, 5, 10)}
        m["fact_em@2"] = float(np.mean([recall(h, r["gold"], 2) == 1.0 for h, r in zip(hits, rows, strict=True)]))
        out[name] = m
    return out


def simulate(signals: Path, out: Path) -> None:
    sets = load_signals(signals)
    sims = {name: [Simulator(s) for s in rows] for name, rows in sets.items()}
    table: dict[str, dict] = {}
    for name in ("cos", "hybrid"):
        table["cosine" if name == "cos" else name] = metrics(sets, {k: [x.fill(name)[:KEEP] for x in v]
                                                                    for k, v in sims.items()})
    table["bm25"] = metrics(sets, {k: [top(s["bm25"])[:KEEP] for s in v] for k, v in sets.items()})
    hop2s = ["q", *(f"rrf{w}:{lex}" for w in (0.25, 0.5, 1.0) for lex in ("question", "state")),
             *(f"add{w}:{lex}" for w in WEIGHTS for lex in ("question", "state"))]
    thresholds: list[float | None] = [None, 0.3, 0.35, 0.4, 0.425, 0.45, 0.5]
    for hop1, hop2, t, fill in itertools.product(HOP1, hop2s, thresholds, ("cos", "hybrid", "hop1")):
        lists = {k: [x.search(hop1, hop2, t, fill) for x in v] for k, v in sims.items()}
        table[f"{hop1}|{hop2}|{t}|{fill}"] = metrics(sets, lists)
    chosen = choose(table)
    # Kept: the floors, every candidate setting, every pair of hop rankings (unguarded, cosine fill) and the 40
    # variants with the best validation fact EM@2.
    best = sorted(table, key=lambda v: -table[v]["hotpotqa_val"]["fact_em@2"])[:40]
    pairs = [f"{h1}|{h2}|None|cos" for h1 in HOP1 for h2 in hop2s]
    kept = {v: {s: {m: round(x, 4) for m, x in ms.items()} for s, ms in table[v].items()}
            for v in ("cosine", "bm25", "hybrid", *candidates().values(), *pairs, *best)}
    out.write_text(json.dumps({"command": " ".join(sys.argv), "n": {k: len(v) for k, v in sets.items()},
                               "choice": chosen, "table": kept}, indent=1))
    report(table)
    print(f"\nchosen: {chosen['chosen']} ({chosen['rule']})")


def off_margin(table: dict[str, dict], name: str) -> float:
    """The variant's worst recall margin to the hybrid over the off-domain sets, each at its k."""
    row, hyb = table[name], table["hybrid"]
    return min(row[s][f"recall@{WIKI_K[s.split('_')[1]]}"] - hyb[s][f"recall@{WIKI_K[s.split('_')[1]]}"]
               for s in row if s.startswith("wiki_"))


def candidates() -> dict[str, str]:
    """What the library's search can be set to (one weight at every hop; fill 'question_unguarded', or the guard
    at a threshold), by its simulated variant."""
    out = {}
    for w in (0.0, *WEIGHTS):
        hop1, hop2 = ("q", "q") if w == 0 else (f"add{w}", f"add{w}:state")
        out[f"lexical_weight={w} fill=question_unguarded"] = f"{hop1}|{hop2}|None|cos"
        for t in (0.3, 0.35, 0.4, 0.425, 0.45, 0.5):
            out[f"lexical_weight={w} fill=question stop_threshold={t}"] = f"{hop1}|{hop2}|{t}|cos"
    return out


def choose(table: dict[str, dict]) -> dict:
    """The shipped search: of the settings whose HotpotQA validation recall@2, @5 and @10 are at least the hybrid's
    and whose worst off-domain recall margin to the hybrid is at least 0, the highest validation fact EM@2."""
    hyb = table["hybrid"]["hotpotqa_val"]
    rows = {}
    for setting, variant in candidates().items():
        m = table[variant]["hotpotqa_val"]
        ok = all(m[f"recall@{k}"] >= hyb[f"recall@{k}"] for k in (2, 5, 10)) and off_margin(table, variant) >= 0
        rows[setting] = {"fact_em@2": m["fact_em@2"], "recall@2": m["recall@2"], "recall@5": m["recall@5"],
                         "recall@10": m["recall@10"], "worst_off_domain_margin": off_margin(table, variant),
                         "eligible": ok}
    eligible = [s for s, r in rows.items() if r["eligible"]]
    best = max(eligible, key=lambda s: rows[s]["fact_em@2"]) if eligible else None
    rows = {s: {m: round(x, 4) if isinstance(x, float) else x for m, x in r.items()} for s, r in rows.items()}
    assert choose.__doc__ is not None
    return {"rule": " ".join(choose.__doc__.split(":", 1)[1].split()), "candidates": rows, "chosen": best}


def report(table: dict[str, dict]) -> None:
    def in_domain(row: dict) -> dict:
        return row["hotpotqa_val"]

    print("baselines on hotpotqa val:", {k: {m: round(v, 3) for m, v in in_domain(table[k]).items()}
                                         for k in ("cosine", "bm25", "hybrid")})
    rows = sorted(table.items(), key=lambda kv: -in_domain(kv[1])["fact_em@2"])
    print(f"{'variant':42s} r@2   r@5   r@10  em@2  worst-off-vs-hybrid")
    for name, row in rows[:30]:
        m = in_domain(row)
        print(f"{name:42s} {m['recall@2']:.3f} {m['recall@5']:.3f} {m['recall@10']:.3f} {m['fact_em@2']:.3f} "
              f"{off_margin(table, name):+.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("model")
    rec.add_argument("--signals", type=Path, required=True)
    rec.add_argument("--wiki-samples", type=int, default=200)
    rec.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, from: {', '.join(SETS)}")
    sim = sub.add_parser("simulate")
    sim.add_argument("--signals", type=Path, required=True)
    sim.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.cmd == "record":
        record(args.model, args.signals, args.sets.split(","), args.wiki_samples)
    else:
        simulate(args.signals, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
