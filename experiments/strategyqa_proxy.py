"""Human questions over the Wikipedia summaries for choosing how `qrag-adapt` builds questions (validation only).

    python experiments/strategyqa_proxy.py build TASK_JSON runs/fanoutqa/corpus.jsonl runs/strategyqa.jsonl
    python experiments/strategyqa_proxy.py compare OUT.json A=runs/x/results.jsonl:qrag B=runs/y/results.jsonl:init ...

`qrag-adapt` chooses what it ships on questions it built itself; how it builds them (the phrasing, the kinds) is a
design choice that needs a judge the built questions cannot give, and FanOutQA's dev and test questions may not be
that judge. This writes one from StrategyQA: BIG-bench's `strategyqa/task.json`, in the `bigbench==1.0.0` sdist on
the package index (pip cannot build it: fetch the archive itself and unpack
`bigbench-1.0.0/bigbench/benchmark_tasks/strategyqa/task.json`), 2 290 yes/no questions written by people, each with
the facts that answer it. A question's supporting passages are the summaries whose titles its text or its facts name
(case-sensitive, whole words, the longest title first; a one-word title the summaries also write in lower case, such
as "Island", names nothing), kept when there are 2 to 8 of them and the question itself names at least one (the
others are hops: "Could Brooke Shields succeed at University of Pennsylvania?" needs Princeton University, named only
in its facts). Written in the `corpus` source's form, `{"id", "question", "supporting": [titles]}`, for `qrag-eval
corpus --data`.

`compare` reads `qrag-eval` results files (`NAME=FILE:METHOD`) and prints, and writes as JSON, each one's recall@2,
@4 and @5 and the paired difference (95 % interval) of every later one against every earlier one.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from stop_words import get_stop_words

from qrag.eval.metrics import paired_margin
from qrag.training.data.synthetic import find_names, name_key, subject_of


def named(text: str, titles: dict[tuple[str, ...], str], longest: int) -> list[str]:
    """The titles `text` names, each once, in order, the longest first at each place."""
    return list(dict.fromkeys(find_names(text, titles, longest)))


def build(task: Path, corpus: Path, out: Path) -> None:
    """Write the questions file (module docstring)."""
    stop = {w.lower() for w in get_stop_words("en")}
    records = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    lower = Counter(w for r in records for w in set(re.findall(r"\b[a-z][a-z-]+\b", r["text"])))
    titles: dict[tuple[str, ...], str] = {}
    for rec in records:
        key = name_key(subject_of("", rec["title"]) or "")
        common = len(key) == 1 and (key[0].lower() in stop or len(key[0]) < 3 or lower[key[0].lower()] >= 3)
        if key and not common:  # a one-word title the corpus also writes in lower case is a common word
            titles.setdefault(key, rec["id"])
    longest = max(len(k) for k in titles)
    examples = json.loads(task.read_text(encoding="utf-8"))["examples"]
    rows = []
    for i, ex in enumerate(examples):
        question = ex["input"].strip()
        facts = ex["target"].split(".", 1)[1] if "." in ex["target"] else ""
        asked = named(question, titles, longest)
        gold = asked + [t for t in named(facts, titles, longest) if t not in asked]
        if asked and 2 <= len(gold) <= 8:
            rows.append({"id": f"strategyqa-{i}", "question": question, "supporting": sorted(gold)})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    hidden = sum(len(r["supporting"]) - len(named(r["question"], titles, longest)) for r in rows)
    print(f"{out}: {len(rows)} of {len(examples)} questions; {sum(len(r['supporting']) for r in rows)} "
          f"supporting passages, {hidden} of them named only in the facts")


METRICS = ("recall_at_2", "recall_at_4", "recall_at_5")


def compare(out: Path, runs: list[str]) -> None:
    """Print and write each run's recalls and the paired differences between runs (module docstring)."""
    scores: dict[str, dict[str, dict[str, float]]] = {}
    for spec in runs:
        name, _, where = spec.partition("=")
        path, _, method = where.rpartition(":")
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
        scores[name] = {r["id"]: {m: r[m] for m in METRICS} for r in rows if r["method"] == method}
        if not scores[name]:
            raise SystemExit(f"{path} holds no results of method {method!r}")
    ids = sorted(set.intersection(*(set(s) for s in scores.values())))
    recall: dict[str, dict[str, float]] = {}
    paired: dict[str, dict[str, dict[str, float]]] = {}
    for name, s in scores.items():
        recall[name] = {m: sum(s[i][m] for i in ids) / len(ids) for m in METRICS}
        print(name, " ".join(f"{m} {recall[name][m]:.3f}" for m in METRICS))
    names = list(scores)
    for j, b in enumerate(names):
        for a in names[j + 1 :]:
            pair = {m: paired_margin([scores[a][i][m] for i in ids], [scores[b][i][m] for i in ids]) for m in METRICS}
            paired[f"{a} - {b}"] = {m: {"diff": d, "half_width": h} for m, (d, h) in pair.items()}
            print(f"{a} - {b}:", " ".join(f"{m} {d:+.3f} ± {h:.3f}" for m, (d, h) in pair.items()))
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"questions": len(ids), "runs": runs, "recall": recall, "paired": paired}
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the questions file")
    b.add_argument("task", type=Path, help="BIG-bench's strategyqa/task.json")
    b.add_argument("corpus", type=Path, help="the summaries, one {id, title, text} per line")
    b.add_argument("out", type=Path, help="the questions file to write")
    c = sub.add_parser("compare", help="recalls and paired differences of qrag-eval results files")
    c.add_argument("out", type=Path, help="the JSON file to write")
    c.add_argument("runs", nargs="+", help="NAME=RESULTS_JSONL:METHOD, the first ones the references")
    args = parser.parse_args()
    if args.command == "build":
        build(args.task, args.corpus, args.out)
    else:
        compare(args.out, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
