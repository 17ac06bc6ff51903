#!/usr/bin/env bash
# run_sanitizer.sh — compute-sanitizer memcheck and racecheck over short training steps of tiny, on
# a machine with a GPU (the Firecracker H200 machines; compute-sanitizer refuses the device under
# gVisor, see the device notes). Run from the repository root (or a copy holding build/ and models/):
#   tests/gpu/run_sanitizer.sh
# Each run: `stepc run` of tiny (1 eager warm-up step, then the mode's graphs), hidden dropout 0.1.
#   memcheck  (--leak-check full), 3 steps: eager, full_iteration, transformer_engine [] (scoped)
#   racecheck (shared-memory hazards; about 18 s per tiny step on the H200, cuBLASLt's kernels
#             dominate): eager 3 steps and full_iteration 2 steps at tiny's shape (the plain
#             attention kernels), eager 1 step at d256/T128 (the flash kernels)
# ONLY=REGEX runs the runs whose name matches. Logs go to $OUT (or ./gpu-sanitizer-logs);
# sanitizer_summary.log has one line per run. Exit 0 when every run reported 0 errors.
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
COMMON="--device cuda model.cuda_graph_warmup_steps=1 model.hidden_dropout=0.1 model.check_for_nan_in_loss_and_grad=false"
FLASH="model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128"
fails=0
san() { # NAME TOOL STEPS [stepc run overrides...]
  local name=$1 tool=$2 steps=$3; shift 3
  [[ -z "${ONLY:-}" || "$name" =~ $ONLY ]] || return 0
  local extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  # shellcheck disable=SC2086
  timeout 240 "$SAN" --tool "$tool" "${extra[@]}" --error-exitcode 3 --print-limit 20 \
    "$BUILD/stepc" run models/tiny.lua --steps "$steps" $COMMON "$@" >"$DEST/san_$name.log" 2>&1
  local rc=$?
  echo "$name ($tool $*): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$DEST/san_$name.log" | tr '\n' ' ')" | tee -a "$SUM"
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
san memcheck_eager memcheck 3
san memcheck_full memcheck 3 model.cuda_graph_impl=full_iteration
san memcheck_scoped memcheck 3 model.cuda_graph_impl=transformer_engine "model.cuda_graph_modules=[]"
san racecheck_eager racecheck 3
san racecheck_full racecheck 2 model.cuda_graph_impl=full_iteration
san racecheck_flash racecheck 1 $FLASH
echo "== $fails failed" | tee -a "$SUM"
exit $((fails > 0))
