#!/usr/bin/env bash
# GPU call 8 (session 9): fp8 on the final main — scoped graphs, replay and the first step against the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
F8="model.fp8=hybrid model.fp8_recipe=tensorwise"
timeout 60 build/tests/gpu/gpu_step grads models/tiny.lua $F8 > $OUT/grads_fp8.txt 2>&1; echo "grads fp8 rc=$?"; grep -E "^FAIL|PASS loss" $OUT/grads_fp8.txt | head -3
timeout 90 build/tests/gpu/gpu_step scoped models/tiny.lua 3 "transformer_engine:[];transformer_engine:[attn];transformer_engine:[mlp];local:[]" $F8 > $OUT/scoped_fp8.txt 2>&1; echo "scoped fp8 rc=$?"; grep -E "^(FAIL|PASS)" $OUT/scoped_fp8.txt | head -6
timeout 60 build/tests/gpu/gpu_step replay tests/recipes/tiny_fp8.lua 6 > $OUT/replay_fp8_firstlast.txt 2>&1; echo "replay tiny_fp8 (first/last bf16) rc=$?"; grep -E "^(FAIL|PASS)" $OUT/replay_fp8_firstlast.txt | head -3
