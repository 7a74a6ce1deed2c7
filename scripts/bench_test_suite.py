"""How long the default test suite takes at two or more commits, side by side in one run on this machine.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_test_suite.py 7f1d905 HEAD --repeats 2 \\
        --out results/test_suite/timings.json
    ... --pin 0 --busy     # the same, pinned to core 0 beside a busy process on that core

Each commit is checked out in a temporary worktree and its own `make test` pytest command (read from its Makefile)
runs there with this virtual environment's Python and the worktree first on the path; the commits alternate
(A B A B ...) so the machine's drift falls on all of them. Prints the wall seconds of every run, their median, the
tests passed and each commit's median as a ratio of the first's; writes JSON with the CPU's flags.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qrag.training.model.precision import speed_flags

REPO = Path(__file__).resolve().parents[1]


def pytest_args(worktree: Path) -> list[str]:
    """The arguments `make test` gives pytest at that commit."""
    recipe = (worktree / "Makefile").read_text().split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    line = next(x for x in recipe.splitlines() if "-m pytest" in x)
    return shlex.split(line.split("-m pytest", 1)[1])


def cpu() -> dict[str, object]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = re.search(r"model name\s*:\s*(.+)", text)
    return {"model": model.group(1) if model else platform.processor(), "cores": os.cpu_count(),
            "flags": speed_flags()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revs", nargs="+", help="commits to compare (the first is the baseline of the ratios)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--pin", type=int, help="run pinned to this core (taskset)")
    parser.add_argument("--busy", action="store_true", help="with --pin: a busy process on the same core")
    parser.add_argument("--out", default="results/test_suite/timings.json")
    args = parser.parse_args()
    shas = [subprocess.run(["git", "rev-parse", "--short", r], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.strip() for r in args.revs]
    runs: dict[str, list[dict[str, object]]] = {s: [] for s in shas}
    busy = None
    with tempfile.TemporaryDirectory() as tmp:
        trees, argv = {}, {}
        for sha in shas:
            trees[sha] = Path(tmp) / sha
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(trees[sha]), sha], cwd=REPO, check=True)
            argv[sha] = pytest_args(trees[sha])
        pin = ["taskset", "-c", str(args.pin)] if args.pin is not None else []
        if args.busy and pin:
            busy = subprocess.Popen([*pin, sys.executable, "-c", "while True: pass"])
        try:
            for _ in range(args.repeats):
                for sha in shas:
                    command = [*pin, sys.executable, "-m", "pytest", *argv[sha]]
                    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(trees[sha])}
                    start = time.perf_counter()
                    done = subprocess.run(command, cwd=trees[sha], env=env, capture_output=True, text=True)
                    wall = time.perf_counter() - start
                    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
                    passed = re.search(r"(\d+) passed", tail)
                    runs[sha].append({"wall_s": round(wall, 1), "exit": done.returncode, "summary": tail,
                                      "passed": int(passed.group(1)) if passed else 0})
                    print(f"{sha}: {wall:6.1f} s  {tail}", flush=True)
        finally:
            if busy is not None:
                busy.kill()
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    first = statistics.median(float(r["wall_s"]) for r in runs[shas[0]])  # type: ignore[arg-type]
    rows = []
    print(f"\n| commit | pytest arguments | runs (s) | median (s) | tests passed | × {shas[0]} |\n|---|---|---|---|---|---|")
    for sha in shas:
        walls = [float(r["wall_s"]) for r in runs[sha]]  # type: ignore[arg-type]
        med = statistics.median(walls)
        rows.append({"commit": sha, "pytest_args": " ".join(argv[sha]), "runs": runs[sha], "median_s": med,
                     "ratio": round(med / first, 3)})
        print(f"| {sha} | `{' '.join(argv[sha])}` | {', '.join(f'{w:.1f}' for w in walls)} | {med:.1f} | "
              f"{runs[sha][-1]['passed']} | {med / first:.2f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "cpu": cpu(), "pin": args.pin, "busy": args.busy,
                               "date": time.strftime("%Y-%m-%d"), "results": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
