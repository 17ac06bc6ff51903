#!/usr/bin/env bash
# GPU call 6 (session 12): the fp8 step tests again after tests/gpu/trainer.c plans the step a build
# runs (Spec.per_rank): until now gpu_step's trainer lowered fp8 recipes with bf16 linears, so its
# fp8 grads / replay / recompute / scoped checks ran bf16 (the CLI and artifact runs were fp8).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
ONLY=fp8 GPL3=gpuwork/text.txt OUT=$OUT/steps timeout 400 tests/gpu/run_step_tests.sh > $OUT/step_tests.txt 2>&1; echo "fp8 step tests rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^-- |^FAIL|checks|PASS (loss|27)" $OUT/steps/summary.log | head -60
grep -h "PASS loss\|worst" $OUT/steps/fp8_grads_*.log
echo "done at $(( $(date +%s) - t0 )) s"
