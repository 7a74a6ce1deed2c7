#!/usr/bin/env bash
# Assemble .gpu/ (fp16 MiniLM, wheels, text pack) for the GPU commands and print its size; run it HERE (CPU).
# Options: --force-minilm --force-wheels --force-text --limit-mib N (see scripts/gpu/pack.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec env OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" nice -n 5 python scripts/gpu/pack.py "$@"
