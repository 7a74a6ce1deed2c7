"""How compare.json was made: the removed scale script's JSON against a qrag-eval folder, per sample and method.

    python results/scale_in_eval/compare.py old.json new/ compare.json
"""

import json
import sys
from pathlib import Path

old_path, new_folder, out_path = sys.argv[1:4]
old = json.loads(Path(old_path).read_text())
new = {(r["method"], r["id"]): r for r in map(json.loads, (Path(new_folder) / "results.jsonl").read_text().splitlines())}
out: dict = {"methods": {}}
for cell in old["cells"]:
    for rec in cell["records"]:
        for m in ("qrag", "qrag+stop", "dense", "bm25"):
            rows = rec[m]["rows"] if isinstance(rec[m], dict) else rec[m]
            n = new[(m, rec["id"])]
            d = out["methods"].setdefault(m, {"samples": 0, "same_ranking": 0, "same_set": 0, "old_em": 0.0,
                                              "new_em": 0.0, "diffs": []})
            d["samples"] += 1
            d["same_ranking"] += rows == n["retrieved"]
            d["same_set"] += set(rows) == set(n["retrieved"])
            d["old_em"] += rec["em"][m]
            d["new_em"] += n["fact_em"]
            if rows != n["retrieved"]:
                d["diffs"].append({"id": rec["id"], "old": rows, "new": n["retrieved"]})
for m, d in out["methods"].items():
    d["old_em"], d["new_em"] = round(d["old_em"] / d["samples"], 4), round(d["new_em"] / d["samples"], 4)
    print(m, {k: v for k, v in d.items() if k != "diffs"})
Path(out_path).write_text(json.dumps(out, indent=1))
