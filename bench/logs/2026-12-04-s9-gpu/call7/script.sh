#!/usr/bin/env bash
# GPU call 7 (session 9): the bench table's M, Mb8 and MoE7 rows beside torch.compile (bench/run_bench.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
OUT=$OUT SHAPES="MoE7 M Mb8" TORCH_STEP=gpuwork/torch_step.py TORCH_MOE=gpuwork/torch_moe.py timeout 540 bench/run_bench.sh > $OUT/bench.out 2>&1; echo "bench rc=$?"; cat $OUT/summary.txt
