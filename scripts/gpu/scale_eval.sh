#!/usr/bin/env bash
# ONE GPU command (docs/GPU_RUNBOOK.md): the scale evaluation with the carried checkpoints, nothing downloaded.
#  1. BabiLong-style qa1–qa5 at 32K, 10M, 1M, 128K tokens with the qa15 checkpoint; before the cells, at 1M and
#     10M: indexing throughput (one haystack indexed from scratch) and 1–6-hop latency / QPS on it.
#  2. RULER NIAH, all 8 subtasks, at 4K, 128K, 1M, 32K, 16K, 64K, 8K with the niah checkpoint.
# qrag, qrag+stop, single-hop dense (untrained base) and BM25 side by side in every cell.
# Into $OUT: babilong.json, babilong.md, niah.json, niah.md, scale_eval.log (5 files).
#
# Knobs (environment): QA_MODEL (.gpu/runs/qa15/best), NIAH_MODEL (.gpu/runs/niah/best; empty skips NIAH),
# QA_BUDGET (330) / NIAH_BUDGET (170): seconds after which no new sample starts (each part then writes what
# it has); QA_ARGS / NIAH_ARGS: extra scale_eval.py flags, applied last (e.g. "--samples 20").
set -uo pipefail
source "$(dirname "$0")/env.sh"
QA_MODEL="${QA_MODEL-$RUNS/qa15/best}"
NIAH_MODEL="${NIAH_MODEL-$RUNS/niah/best}"
export QRAG_COMMIT="${QRAG_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || true)}"
status=0
LOG="$OUT/scale_eval.log"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  "$PY" scripts/gpu/offline.py check; } 2>&1 | tee "$LOG"
part() {  # run scale_eval.py with the given flags, log it, remember a failure
  "$PY" scripts/gpu/scale_eval.py "$@" 2>&1 | grep --line-buffered -v "Loading weights" | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
# shellcheck disable=SC2086  # *_ARGS are lists of flags
part --benchmark babilong --model "$QA_MODEL" --lengths 32k,10m,1m,128k --samples 100 --samples-at 10m=50 \
  --latency-lengths 1m,10m --hops 1-6 --time-budget "${QA_BUDGET:-330}" \
  --out "$OUT/babilong.json" --table "$OUT/babilong.md" ${QA_ARGS:-}
if [ -n "$NIAH_MODEL" ]; then
  # shellcheck disable=SC2086
  part --benchmark ruler --model "$NIAH_MODEL" --lengths 4k,128k,1m,32k,16k,64k,8k --samples 30 --samples-at 1m=15 \
    --time-budget "${NIAH_BUDGET:-170}" --out "$OUT/niah.json" --table "$OUT/niah.md" ${NIAH_ARGS:-}
fi
ls -la "$OUT"
exit "$status"
