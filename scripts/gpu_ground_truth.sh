#!/usr/bin/env bash
# Ground truth from one GPU for issue 8, in ONE call of under ~9 minutes.
#
#   bash scripts/gpu_ground_truth.sh            # on the GPU machine (python3 there has torch)
#
# Steps (python -m backends.torch.calibrate.ground_truth STEP; see its docstring), each under `timeout`,
# each writing rows as it measures:
#   calibrate  (<= 100 s)  sim calibrate --device cuda --nproc 1 + calibration.csv
#   profile    (<= 170 s)  GPT blocks: hidden 1024/2048/4096 x seq 1024/2048 x flash/math x b 1..16
#   grid       (<= 250 s)  single-rank replays: GPipe/1F1B/2BW/PipeDream x rank 0 of p 2/4/8 x
#                          none/recompute/cpu_swap x b 2/8
#   provenance (<= 30 s)   GPU, driver, torch, CUDA, date, command
# Results are measured in $WORK/<gpu> (default /tmp/pipesim-gt) and, after every step, packed into
# $DEST_DIR/ground_truth-<gpu>.tar.gz with run.log beside it ($DEST_DIR = $OUT if set, else
# measurements/), so a step that times out keeps what was measured before it. Unpack into
# measurements/ and commit: tests/test_gpu_ground_truth.py then checks the simulator against it.
#
# The device image lacks pydantic: carry its wheels in .whl (see README "Ground truth from a
# GPU"); they are installed into /tmp/site here when present.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! $PY -c "import pydantic, simpy, yaml" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
$PY -c "import pydantic, simpy, yaml, pandas" || {
  echo "missing packages: carry pydantic (and its needs) as wheels in .whl; see README" >&2; exit 1; }
DEVICE=${DEVICE:-cuda}
EXTRA=${EXTRA:-}                       # e.g. EXTRA=--tiny DEVICE=cpu for a dry run on a CPU
SLUG=$($PY -m backends.torch.calibrate.ground_truth dest --device "$DEVICE") || exit 1
WORK=${WORK:-/tmp/pipesim-gt}
HERE="$WORK/$SLUG"
DEST_DIR=${OUT:-validation}
mkdir -p "$HERE" "$DEST_DIR"
LOG="$DEST_DIR/run.log"
: >"$LOG"
step() {
  local limit=$1 name=$2; shift 2
  echo "== $(date -u +%FT%TZ) $name (limit ${limit}s)" | tee -a "$LOG"
  timeout -k 10 "$limit" $PY -m backends.torch.calibrate.ground_truth "$name" --dest "$HERE" \
    --device "$DEVICE" $EXTRA "$@" 2>&1 | tee -a "$LOG"
  echo "== $name rc=${PIPESTATUS[0]}" | tee -a "$LOG"
  tar -C "$WORK" -czf "$DEST_DIR/ground_truth-$SLUG.tar.gz" "$SLUG"
}
nvidia-smi >>"$LOG" 2>&1 || true
step 100 calibrate
step 170 profile --budget-s 150
step 250 grid --budget-s 225
step 30 provenance
echo "wrote $DEST_DIR/ground_truth-$SLUG.tar.gz ($(ls "$HERE" | tr '\n' ' '))" | tee -a "$LOG"
