#!/usr/bin/env bash
# GPU call 1 (session 9): the fp8 cast kernels (exact), the grouped GEMMs with one wgmma group kept
# in flight (checks + timing), MoE7 step with its profile.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
timeout 200 build/tests/gpu/gpu_kernels --only fp8 > $OUT/fp8.txt 2>&1; echo "fp8 rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAIL|checks" $OUT/fp8.txt | head -20
timeout 200 build/tests/gpu/gpu_kernels --only basic > $OUT/basic.txt 2>&1; echo "basic rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAIL|checks|grouped|TFLOP" $OUT/basic.txt | head -40
timeout 200 build/stepc run models/moonlight_mha_7l.lua --device cuda --steps 15 --json model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false > $OUT/moe7.json 2> $OUT/moe7.err; echo "moe7 rc=$? at $(( $(date +%s) - t0 )) s"; tail -3 $OUT/moe7.err
timeout 200 build/stepc run models/moonlight_mha_7l.lua --device cuda --steps 6 --profile model.check_for_nan_in_loss_and_grad=false > $OUT/moe7_profile.txt 2>&1; echo "moe7 profile rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "grouped|total|step" $OUT/moe7_profile.txt | head -12
