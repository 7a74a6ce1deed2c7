#!/usr/bin/env bash
# The scale evaluation on one CUDA GPU (docs/GPU_GUIDE.md), with the checkpoints scripts/gpu/train.sh wrote; two
# `qrag-eval` sweeps:
#  1. BabiLong-style qa1–qa5 at 32K, 128K, 1M and 10M tokens with the qa15 checkpoint (100 samples per cell, 50 at
#     10M). Before the cells, at 1M and 10M: one haystack indexed from scratch (chunks/s, estimated fraction of
#     the GPU's bf16 peak) and 1–6-hop latency / batched questions per second on it (speed.json, speed.md).
#  2. RULER NIAH, all 8 subtasks, at 4K to 128K and 1M tokens with the niah checkpoint (30 samples, 15 at 1M).
# qrag (exactly |SF| hops), qrag+stop (the checkpoint's stop rule), single-hop dense search with the untrained
# base encoder and BM25, side by side on the same episodes; drift.md pairs each sample at the longest length
# with the shortest. Into $RUNS/scale (runs/gpu/scale): babilong/ and niah/ (qrag-eval's results.jsonl,
# summary.json, table.md, margins.md, drift.md, plot.png; speed.* in babilong/) and scale_eval.log.
# Running it again resumes: finished samples are skipped (results.jsonl is appended after every sample).
#
# Knobs (environment): QA_MODEL ($RUNS/qa15/best; any checkpoint folder or a shipped qrag/NAME), NIAH_MODEL
# ($RUNS/niah/best; empty skips NIAH), DEVICE (cuda when torch sees a GPU, else cpu), PRECISION (bf16 on a GPU,
# else fp32); QA_ARGS / NIAH_ARGS: extra qrag-eval flags, applied last (e.g. "--num-samples 20").
set -uo pipefail
source "$(dirname "$0")/env.sh"
QA_MODEL="${QA_MODEL-$RUNS/qa15/best}"
NIAH_MODEL="${NIAH_MODEL-$RUNS/niah/best}"
if [ -z "${DEVICE:-}" ]; then
  DEVICE="$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")"
fi
if [ -z "${PRECISION:-}" ]; then
  if [ "$DEVICE" = cpu ]; then PRECISION=fp32; else PRECISION=bf16; fi
fi
DEST="$RUNS/scale"
mkdir -p "$DEST"
status=0
LOG="$DEST/scale_eval.log"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  "$PY" scripts/gpu/offline.py check; } 2>&1 | tee -a "$LOG"
part() {  # one qrag-eval sweep (through offline.py, which serves $QRAG_TEXT_PACK when set); log it, remember a failure
  "$PY" scripts/gpu/offline.py eval "$@" 2>&1 | tee -a "$LOG"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
METHODS=qrag,qrag+stop,dense,cosine,bm25
# shellcheck disable=SC2086  # *_ARGS are lists of flags
part babilong --model "$QA_MODEL" --methods "$METHODS" --lengths 32k,128k,1m,10m --num-samples 100 --samples-at 10m=50 \
  --speed-lengths 1m,10m --speed-hops 1-6 --batch-size 64 --device "$DEVICE" --precision "$PRECISION" --no-progress \
  --out "$DEST/babilong" ${QA_ARGS:-}
if [ -n "$NIAH_MODEL" ]; then
  # shellcheck disable=SC2086
  part ruler --model "$NIAH_MODEL" --methods "$METHODS" --lengths 4k,8k,16k,32k,64k,128k,1m --num-samples 30 --samples-at 1m=15 \
    --batch-size 64 --device "$DEVICE" --precision "$PRECISION" --no-progress --out "$DEST/niah" ${NIAH_ARGS:-}
fi
ls -l "$DEST"
exit "$status"
