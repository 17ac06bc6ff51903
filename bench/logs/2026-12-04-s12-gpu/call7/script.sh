#!/usr/bin/env bash
# GPU call 7 (session 12): gpu_step grads, fp8 against the CPU emulation and the fp32 step (both), and
# a bf16 recipe as before.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
S=build/tests/gpu/gpu_step
F8T="model.fp8=hybrid model.fp8_recipe=tensorwise"
F8D="model.fp8=hybrid model.fp8_recipe=delayed"
timeout 60 $S grads models/tiny.lua > $OUT/grads_bf16.txt 2>&1; echo "bf16 rc=$? $(tail -1 $OUT/grads_bf16.txt)"
timeout 60 $S grads models/tiny.lua $F8T > $OUT/grads_fp8_t.txt 2>&1; echo "fp8 tensorwise rc=$?"; grep -E "loss|gradients" $OUT/grads_fp8_t.txt
timeout 60 $S grads models/tiny.lua $F8D > $OUT/grads_fp8_d.txt 2>&1; echo "fp8 delayed rc=$?"; grep -E "loss|gradients" $OUT/grads_fp8_d.txt
timeout 60 $S grads models/tiny.lua $F8D model.fp8_amax_history_len=4 model.fp8_amax_compute_algo=max model.fp8_margin=1 train.global_batch_size=4 > $OUT/grads_fp8_d4.txt 2>&1; echo "fp8 delayed h4 rc=$?"; grep -E "loss|gradients" $OUT/grads_fp8_d4.txt
grep FAIL $OUT/grads_fp8_*.txt | head -5
