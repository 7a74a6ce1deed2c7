# Sourced by the one-command GPU scripts (train.sh, scale_eval.sh); also works on the CPU machine.
# Goes to the repo root, sets offline settings, installs the carried wheels (.gpu/whl) into $QRAG_SITE
# (default /tmp/site, as /work/.library/device/README.md says) and puts it and the repo on PYTHONPATH,
# points the text generators at the carried text pack, unpacks the run tarballs an earlier GPU call brought
# back (.gpu/returned/*.tgz, or $QRAG_RETURNED/*.tgz, e.g. docs/gpu/checkpoints; see docs/GPU_RUNBOOK.md) into
# $RUNS, and makes sure $OUT exists.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO" || exit 1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# The GPU image has JAX, which bm25s picks up for its top-k; JAX then preallocates 75% of the GPU's memory
# (~59 GiB of an H100) and the 10M-token cells ran out of memory (first scale_eval call). Keep JAX on the CPU.
export JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export QRAG_TEXT_PACK="${QRAG_TEXT_PACK:-$REPO/.gpu/text/sentences.json.xz}"
QRAG_SITE="${QRAG_SITE:-/tmp/site}"
PY="${PYTHON:-python3}"
if [ -z "${QRAG_NO_WHEELS:-}" ] && compgen -G ".gpu/whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$QRAG_SITE" \
    .gpu/whl/*.whl || { echo "env.sh: installing the carried wheels failed" >&2; exit 1; }
  export PYTHONPATH="$QRAG_SITE:$REPO"
else
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi
export OUT="${OUT:-$REPO/outputs/gpu}"
mkdir -p "$OUT"
RUNS="${RUNS:-.gpu/runs}"
mkdir -p "$RUNS"
for f in "${QRAG_RETURNED:-.gpu/returned}"/*.tgz; do
  [ -f "$f" ] || continue
  tar xzf "$f" -C "$RUNS" || { echo "env.sh: cannot unpack $f" >&2; exit 1; }
  echo "env.sh: unpacked $f into $RUNS"
done
[ -f .gpu/minilm/config.json ] || { echo "env.sh: .gpu/minilm is missing: run scripts/gpu/pack.sh and carry .gpu" >&2; exit 1; }
