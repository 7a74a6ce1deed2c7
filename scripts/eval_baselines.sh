#!/usr/bin/env bash
# Baseline rows of docs/RESULTS.md: BabiLong-style qa1–qa5, split test, retrieval metrics only, on CPU.
# Resumable: rerun the same command and finished samples are skipped. Usage: scripts/eval_baselines.sh [OUT] [LENGTHS]
set -euo pipefail
OUT="${1:-runs/baselines_babilong}"
LENGTHS="${2:-1k,4k,32k}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$(dirname "$0")/../.venv/bin/qrag-eval" babilong \
  --tasks qa1,qa2,qa3,qa4,qa5 --lengths "$LENGTHS" --num-samples 100 \
  --methods bm25,dense,multihop,oracle --encoder all-MiniLM-L6-v2 --out "$OUT"
