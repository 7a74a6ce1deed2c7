#!/usr/bin/env bash
# qrag-eval with --chunk-vectors, the same sweep twice (fresh --out each time): the first run fills the folder,
# the second reads every chunk vector from it. Prints the wall times, checks the records agree, writes JSON.
#   bash scripts/bench_chunk_vectors.sh [OUT_DIR=runs/cv_bench] [JSON=results/chunk_vectors_bench.json]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/cv_bench}
json=${2:-results/chunk_vectors_bench.json}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HF_HUB_OFFLINE=1
rm -rf "$out" && mkdir -p "$out"
args=(babilong --tasks qa2,qa3 --lengths 32k --num-samples 50 --methods dense,multihop,qrag,qrag+stop
      --model qrag/babilong-minilm-cpu --max-hops 4 --chunk-vectors "$out/vectors" --no-progress)
for run in first second; do
  start=$EPOCHREALTIME
  .venv/bin/qrag-eval "${args[@]}" --out "$out/$run" > "$out/$run.log" 2>&1
  echo "$run $start $EPOCHREALTIME" >> "$out/times.txt"
done
.venv/bin/python - "$out" "$json" "${args[*]}" <<'PY'
import json, platform, subprocess, sys
out, path, args = sys.argv[1:]
times = {run: float(end) - float(start) for run, start, end in (line.split() for line in open(f"{out}/times.txt"))}
cells = [json.load(open(f"{out}/{run}/summary.json"))["cells"] for run in ("first", "second")]
same = [(a["method"], a["task"], a["fact_em"]) for a in cells[0]] == [(b["method"], b["task"], b["fact_em"]) for b in cells[1]]
size = int(subprocess.run(["du", "-sb", f"{out}/vectors"], capture_output=True, text=True).stdout.split()[0])
result = {"command": f"qrag-eval {args} --out {out}/RUN", "machine": f"{platform.machine()}, "
          f"{subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores",
          "first_s": times["first"], "second_s": times["second"], "speedup": times["first"] / times["second"], "folder_mb": size / 2**20, "same_records": same,
          "fact_em": {f"{a['method']} {a['task']}": a["fact_em"] for a in cells[0]}}
print(f"{'run':<8}{'wall s':>9}\nfirst   {result['first_s']:>9.1f}\nsecond  {result['second_s']:>9.1f}\n"
      f"speed-up {result['speedup']:.1f}x, folder {result['folder_mb']:.0f} MB, same records: {same}")
json.dump(result, open(path, "w"), indent=1)
print(f"wrote {path}")
PY
