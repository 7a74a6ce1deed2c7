#!/usr/bin/env bash
# The scale evaluation on one CUDA GPU (docs/GPU_GUIDE.md), with the checkpoints scripts/gpu/train.sh wrote:
#  1. BabiLong-style qa1–qa5 at 32K, 10M, 1M, 128K tokens with the qa15 checkpoint; before the cells, at 1M and
#     10M: indexing throughput (one haystack indexed from scratch) and 1–6-hop latency / QPS on it.
#  2. RULER NIAH, all 8 subtasks, at 4K, 128K, 1M, 32K, 16K, 64K, 8K with the niah checkpoint.
# qrag, qrag+stop, single-hop dense (untrained base) and BM25 side by side in every cell.
# Into $RUNS/scale (runs/gpu/scale): babilong.json, babilong.md, niah.json, niah.md, scale_eval.log. The JSON
# files are rewritten after every cell, so an interrupted run keeps what it finished.
#
# Knobs (environment): QA_MODEL ($RUNS/qa15/best; any checkpoint folder or a shipped qrag/NAME), NIAH_MODEL
# ($RUNS/niah/best; empty skips NIAH), QA_BUDGET / NIAH_BUDGET: seconds after which no new sample starts
# (default: none); QA_ARGS / NIAH_ARGS: extra scale_eval.py flags, applied last (e.g. "--samples 20").
set -uo pipefail
source "$(dirname "$0")/env.sh"
QA_MODEL="${QA_MODEL-$RUNS/qa15/best}"
NIAH_MODEL="${NIAH_MODEL-$RUNS/niah/best}"
DEST="$RUNS/scale"
mkdir -p "$DEST"
status=0
LOG="$DEST/scale_eval.log"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  "$PY" scripts/gpu/offline.py check; } 2>&1 | tee -a "$LOG"
part() {  # run scale_eval.py with the given flags, log it, remember a failure
  "$PY" scripts/gpu/scale_eval.py "$@" 2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
budget() { [ -n "$1" ] && echo "--time-budget $1"; }
# shellcheck disable=SC2046,SC2086  # *_ARGS are lists of flags
part --benchmark babilong --model "$QA_MODEL" --lengths 32k,10m,1m,128k --samples 100 --samples-at 10m=50 \
  --latency-lengths 1m,10m --hops 1-6 $(budget "${QA_BUDGET:-}") \
  --out "$DEST/babilong.json" --table "$DEST/babilong.md" ${QA_ARGS:-}
if [ -n "$NIAH_MODEL" ]; then
  # shellcheck disable=SC2046,SC2086
  part --benchmark ruler --model "$NIAH_MODEL" --lengths 4k,128k,1m,32k,16k,64k,8k --samples 30 --samples-at 1m=15 \
    $(budget "${NIAH_BUDGET:-}") --out "$DEST/niah.json" --table "$DEST/niah.md" ${NIAH_ARGS:-}
fi
ls -l "$DEST"
exit "$status"
