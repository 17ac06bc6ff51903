#!/usr/bin/env bash
# GPU call (session 14): ZeRO-1 on cuda through runtime/zero_coll.c (h-zcu: buckets reduce-scattered and
# params all-gathered through the planned staging), first at world 1 over NCCL (tests/gpu/run_dp.sh:
# bitwise the plain step, region and peak = plan), then on ranks sharing the GPU under DP / EP /
# TP x EP (tests/gpu/zero_ep.sh: ZeRO = without, bitwise), then the fp8 MoE artifact's refusal at open.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
OUT=$OUT/run_dp timeout 240 tests/gpu/run_dp.sh > $OUT/run_dp.txt 2>&1; echo "run_dp rc=$? at $(( $(date +%s) - t0 )) s"; tail -5 $OUT/run_dp.txt
OUT=$OUT/zero_ep STEPS=6 timeout 300 tests/gpu/zero_ep.sh > $OUT/zero_ep.txt 2>&1; echo "zero_ep rc=$? at $(( $(date +%s) - t0 )) s"; tail -8 $OUT/zero_ep.txt
build/stepc build tests/recipes/tiny_mla_moe_fp8.lua -o /tmp/f8moe > $OUT/f8moe_build.txt 2>&1
timeout 60 /tmp/f8moe/train --device cuda --steps 1 > $OUT/f8moe_run.txt 2>&1; echo "fp8 MoE on cuda: rc=$? (expected 4): $(tail -1 $OUT/f8moe_run.txt)"
echo "done at $(( $(date +%s) - t0 )) s"
