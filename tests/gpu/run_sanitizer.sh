#!/usr/bin/env bash
# run_sanitizer.sh — compute-sanitizer memcheck and racecheck over short training steps of tiny, on
# a machine with a GPU (the Firecracker H200 machines; compute-sanitizer refuses the device under
# gVisor, see the device notes). Run from the repository root (or a copy holding build/ and models/):
#   tests/gpu/run_sanitizer.sh
# Each run: `stepc run` 3 steps (1 eager warm-up step, then the mode's graphs), hidden dropout 0.1.
#   memcheck  (--leak-check full): eager, full_iteration, transformer_engine [] (scoped graphs)
#   racecheck (shared-memory hazards): eager and full_iteration at tiny's shape (the plain attention
#             kernels) and eager at d256/T128 (the flash kernels)
# Logs go to $OUT (or ./gpu-sanitizer-logs); summary.log has one line per run. Exit 0 when every
# run reported 0 errors.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
DEST=${OUT:-gpu-sanitizer-logs}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SUM=$DEST/sanitizer_summary.log
{ date -u +%FT%TZ; "$SAN" --version 2>&1 | tail -1; } >"$SUM"
[ -x "$SAN" ] || { echo "no compute-sanitizer ($SAN)" | tee -a "$SUM"; exit 77; }
COMMON="--device cuda --steps 3 model.cuda_graph_warmup_steps=1 model.hidden_dropout=0.1 model.check_for_nan_in_loss_and_grad=false"
FLASH="model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128"
fails=0
san() { # NAME TOOL [stepc run overrides...]
  local name=$1 tool=$2; shift 2
  local extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  # shellcheck disable=SC2086
  timeout 240 "$SAN" --tool "$tool" "${extra[@]}" --error-exitcode 3 --print-limit 20 \
    "$BUILD/stepc" run models/tiny.lua $COMMON "$@" >"$DEST/san_$name.log" 2>&1
  local rc=$?
  echo "$name ($tool $*): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$DEST/san_$name.log" | tr '\n' ' ')" | tee -a "$SUM"
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
san memcheck_eager memcheck
san memcheck_full memcheck model.cuda_graph_impl=full_iteration
san memcheck_scoped memcheck model.cuda_graph_impl=transformer_engine "model.cuda_graph_modules=[]"
san racecheck_eager racecheck
san racecheck_full racecheck model.cuda_graph_impl=full_iteration
san racecheck_flash racecheck $FLASH
echo "== $fails failed" | tee -a "$SUM"
exit $((fails > 0))
