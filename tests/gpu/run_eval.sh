#!/usr/bin/env bash
# run_eval.sh — stepc_eval on a GPU: tests/api/test_eval.c on the cuda device (bf16 tiny, chunked tiny,
# gpt3_tiny with dropout: the loss of the next step's forward, bitwise; no state changed; log-probs
# consistent with the loss; masks) and tests/gpu/eval_gpu.py (log-probs against the CPU reference,
# eager and full_iteration training left bitwise). Run from the repository root with build/ built:
#   OUT=/tmp/eval-logs tests/gpu/run_eval.sh
# Logs go to $OUT (default ./gpu-eval-logs); exit 0 and "PASS" on every line of summary.log when all pass.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
DEST=${OUT:-gpu-eval-logs}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
PY=python3
$PY -c "import numpy" 2>/dev/null || PY=/usr/bin/python3
: >"$DEST/summary.log"
fails=0
$BUILD/tests/api/test_eval cuda >"$DEST/test_eval_cuda.log" 2>&1
rc=$?
echo "$( [ $rc -eq 0 ] && echo PASS || echo FAIL ) test_eval cuda (exit $rc)" | tee -a "$DEST/summary.log"
[ $rc -eq 0 ] || fails=$((fails + 1))
$PY tests/gpu/eval_gpu.py "$BUILD/stepc" "$DEST" >"$DEST/eval_gpu.log" 2>&1
rc=$?
grep -E "^(PASS|FAIL)" "$DEST/eval_gpu.log" | tee -a "$DEST/summary.log"
echo "$( [ $rc -eq 0 ] && echo PASS || echo FAIL ) eval_gpu.py (exit $rc)" | tee -a "$DEST/summary.log"
[ $rc -eq 0 ] || fails=$((fails + 1))
exit $fails
