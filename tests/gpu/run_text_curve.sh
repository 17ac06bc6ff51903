#!/usr/bin/env bash
# run_text_curve.sh — the tiny recipe trained on real text (GPL-3, bytes) by stepc and by PyTorch
# from the same initial weights on the same batches with the same optimizer; the loss curves
# compared by tests/gpu/torch_train_ref.py (its docstring and docs/gpu-runtime.md, "Training curve
# against PyTorch", give the tolerances and why). Run from the repository root (or a copy holding
# build/, models/ and tests/), on any machine:
#   tests/gpu/run_text_curve.sh
# Per device DEV (cpu, then cuda): `gpu_step dump models/tiny.lua --device DEV data.path=$GPL3`
# writes the initial weights as DEV holds them and the batches of every step (stepc's own data
# source), `stepc run models/tiny.lua --device DEV --steps $STEPS --json data.path=$GPL3` the
# stepc curve, torch_train_ref.py trains PyTorch fp32 (on the GPU when torch sees one) and compares.
# cuda where there is no GPU is a skip, not a failure.
# BUILD (default build) holds stepc and gpu_step, built elsewhere if this machine has no Lua or
# cmake; PYTHON (default python3) has torch; STEPS (default 200); GPL3 the text (default
# /usr/share/common-licenses/GPL-3, else tests/gpu/data/GPL-3); logs and curves go to $OUT (or
# ./gpu-step-logs), text_curve_summary.log holds the lines for bench/RESULTS.md; dumps to $DUMPS
# (default /tmp/stepc-text-curve). CPU_ONLY=1 runs only the cpu pair (the ctest torch_curve.cpu);
# ONLY=REGEX runs the devices whose name matches; TORCH_DEVICE=cpu|cuda picks PyTorch's device.
# Exit 0 when every pair that ran passed, 77 when torch is not importable or the text is missing,
# 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
DEST=${OUT:-gpu-step-logs}
PY=${PYTHON:-python3}
STEPS=${STEPS:-200}
DUMPS=${DUMPS:-/tmp/stepc-text-curve}
STEP=$BUILD/tests/gpu/gpu_step
STEPC=$BUILD/stepc
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg} # one NVRTC cubin cache for every run below
GPL3=${GPL3:-/usr/share/common-licenses/GPL-3}
[ -r "$GPL3" ] || GPL3=tests/gpu/data/GPL-3
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "SKIP torch is not importable by $PY"
  exit 77
fi
if [ ! -r "$GPL3" ]; then
  echo "SKIP no text to train on: neither /usr/share/common-licenses/GPL-3 nor tests/gpu/data/GPL-3 (set GPL3=FILE)"
  exit 77
fi
for b in "$STEP" "$STEPC"; do
  [ -x "$b" ] || { echo "FAIL $b is missing: build first (or set BUILD)"; exit 1; }
done
mkdir -p "$DEST" "$DUMPS"
SUM=$DEST/text_curve_summary.log
TDEV=()
[ -n "${TORCH_DEVICE:-}" ] && TDEV=(--torch-device "$TORCH_DEVICE")
fails=0 ran=0
pair() { # DEV: dump, stepc run, PyTorch, compare
  local dev=$1 dir=$DUMPS/$1 log=$DEST/text_curve_$1.log
  [[ -z "${ONLY:-}" || "$dev" =~ $ONLY ]] || return 0
  [[ -z "${CPU_ONLY:-}" || "$dev" == cpu ]] || return 0
  echo "== text_curve $dev: $STEPS steps of models/tiny.lua on $GPL3" | tee -a "$SUM"
  : >"$log"
  timeout 300 "$STEP" dump models/tiny.lua "$dir" --device "$dev" data.path="$GPL3" >>"$log" 2>&1
  local rc=$?
  if [ $rc -eq 77 ]; then
    echo "SKIP $dev: $(tail -1 "$log")" | tee -a "$SUM"
    return 0
  fi
  if [ $rc -eq 0 ]; then
    echo "+ $STEPC run models/tiny.lua --device $dev --steps $STEPS --json data.path=$GPL3" >>"$log"
    timeout 900 "$STEPC" run models/tiny.lua --device "$dev" --steps "$STEPS" --json data.path="$GPL3" \
      >"$DEST/text_curve_stepc_$dev.json" 2>>"$log"
    rc=$?
    [ $rc -eq 0 ] || echo "FAIL stepc run --device $dev exit $rc" >>"$log"
  fi
  if [ $rc -eq 0 ]; then
    timeout 900 "$PY" tests/gpu/torch_train_ref.py "$dir" --stepc "$DEST/text_curve_stepc_$dev.json" --steps "$STEPS" \
      --out "$DEST/text_curve_torch_$dev.json" --label "stepc-$dev" "${TDEV[@]}" >>"$log" 2>&1
    rc=$?
  fi
  grep -E "^(PASS|FAIL|SKIP|RESULT)|scale:" "$log" | tee -a "$SUM"
  grep -E "^ROW " "$log" | sed 's/^ROW //' >>"$DUMPS/rows.md"
  echo "-- text_curve $dev exit $rc" | tee -a "$SUM"
  ran=$((ran + 1))
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
{ date -u +%FT%TZ; echo "commit ${STEPC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null; } >"$SUM"
: >"$DUMPS/rows.md"
pair cpu
pair cuda
if [ -s "$DUMPS/rows.md" ]; then # the markdown table for bench/RESULTS.md
  { "$PY" tests/gpu/torch_train_ref.py --row-header; cat "$DUMPS/rows.md"; } | tee -a "$SUM"
fi
echo "== text_curve: $ran ran, $fails failed" | tee -a "$SUM"
exit $((fails > 0))
