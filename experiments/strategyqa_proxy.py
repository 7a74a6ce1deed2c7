"""Human questions over the Wikipedia summaries for choosing how `qrag-adapt` builds questions (validation only).

    python experiments/strategyqa_proxy.py TASK_JSON runs/fanoutqa/corpus.jsonl runs/strategyqa.jsonl

`qrag-adapt` chooses what it ships on questions it built itself; how it builds them (the phrasing, the kinds) is a
design choice that needs a judge the built questions cannot give, and FanOutQA's dev and test questions may not be
that judge. This writes one from StrategyQA (BIG-bench's `strategyqa/task.json`, in the `bigbench==1.0.0` sdist:
2 290 yes/no questions written by people, each with the facts that answer it): a question's supporting passages
are the summaries whose titles its text or its facts name (case-sensitive, whole words, the longest title
first; a one-word title the summaries also write in lower case, such as "Island", names nothing),
kept when there are 2 to 8 of them and the question itself names at least one (the others are hops: "Could Brooke
Shields succeed at University of Pennsylvania?" needs Princeton University, named only in its facts). Written in
the `corpus` source's form, `{"id", "question", "supporting": [titles]}`, for `qrag-eval corpus --data`.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from stop_words import get_stop_words

_EDGE = "\"'“”‘’()[]{},.;:!?"


def _words(text: str) -> list[str]:
    return [w.strip(_EDGE).removesuffix("'s").removesuffix("’s") for w in text.split()]


def named(text: str, titles: dict[tuple[str, ...], str], longest: int) -> list[str]:
    """The titles `text` names, in order, the longest first at each place."""
    words, at, found = _words(text), 0, []
    while at < len(words):
        for n in range(min(longest, len(words) - at), 0, -1):
            hit = titles.get(tuple(words[at : at + n]))
            if hit is not None:
                if hit not in found:
                    found.append(hit)
                at += n
                break
        else:
            at += 1
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", type=Path, help="BIG-bench's strategyqa/task.json")
    parser.add_argument("corpus", type=Path, help="the summaries, one {id, title, text} per line")
    parser.add_argument("out", type=Path, help="the questions file to write")
    args = parser.parse_args()
    stop = {w.lower() for w in get_stop_words("en")}
    records = [json.loads(line) for line in args.corpus.read_text(encoding="utf-8").splitlines()]
    lower = Counter(w for r in records for w in set(re.findall(r"\b[a-z][a-z-]+\b", r["text"])))
    titles: dict[tuple[str, ...], str] = {}
    for rec in records:
        key = tuple(_words(re.sub(r"\s*\([^)]*\)\s*$", "", rec["title"])))
        common = len(key) == 1 and (key[0].lower() in stop or len(key[0]) < 3 or lower[key[0].lower()] >= 3)
        if key and not common:  # a one-word title the corpus also writes in lower case is a common word
            titles.setdefault(key, rec["id"])
    longest = max(len(k) for k in titles)
    examples = json.loads(args.task.read_text(encoding="utf-8"))["examples"]
    rows = []
    for i, ex in enumerate(examples):
        question = ex["input"].strip()
        facts = ex["target"].split(".", 1)[1] if "." in ex["target"] else ""
        asked = named(question, titles, longest)
        gold = asked + [t for t in named(facts, titles, longest) if t not in asked]
        if asked and 2 <= len(gold) <= 8:
            rows.append({"id": f"strategyqa-{i}", "question": question, "supporting": sorted(gold)})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    hidden = sum(len(r["supporting"]) - len(named(r["question"], titles, longest)) for r in rows)
    print(f"{args.out}: {len(rows)} of {len(examples)} questions; {sum(len(r['supporting']) for r in rows)} "
          f"supporting passages, {hidden} of them named only in the facts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
