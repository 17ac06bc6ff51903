#!/usr/bin/env bash
# GPU call 6 (session 9): fp8 casts with more loads in flight — exactness, M and L8 fp8 steps and M's
# profile; torchao float8 tensorwise at L8 in the same call.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
F8="model.fp8=hybrid model.fp8_recipe=tensorwise"
timeout 100 build/tests/gpu/gpu_kernels --only fp8 > $OUT/fp8.txt 2>&1; echo "fp8 casts rc=$?"; grep -E "FAIL|checks" $OUT/fp8.txt | head
timeout 100 build/tests/gpu/gpu_step grads models/tiny.lua $F8 > $OUT/grads_fp8.txt 2>&1; echo "grads fp8 rc=$?"; grep -E "^FAIL|PASS loss" $OUT/grads_fp8.txt | head -3
for v in "M bench_m" "L8 llama3_8b model.num_layers=8"; do set -- $v; name=$1; shift; rec=$1; shift
  timeout 150 build/stepc run models/$rec.lua "$@" $F8 --device cuda --steps 15 --json model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false > $OUT/${name}_fp8.json 2> $OUT/${name}_fp8.err; echo "$name fp8 rc=$?"
  python3 -c "
import json,statistics; d=json.load(open('$OUT/${name}_fp8.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('$name fp8 median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'])" 2>&1 | tail -1
done
timeout 100 build/stepc run models/bench_m.lua $F8 --device cuda --steps 3 --profile model.check_for_nan_in_loss_and_grad=false > $OUT/M_fp8_profile.txt 2>&1; grep -E "^(gemm_fp8|fp8_cast|total)" $OUT/M_fp8_profile.txt
echo "stepc done at $(( $(date +%s) - t0 )) s"
W=$(ls gpuwork/wheels/torchao-*.whl | head -1)
PYTHONUNBUFFERED=1 timeout 300 python3 gpuwork/torch_fp8.py --torchao-wheel $W --model L8 --variants compile:none,compile_fp8_tensorwise:none --out $OUT/torch_fp8.jsonl > $OUT/torch_fp8_L8.log 2>&1; echo "torch fp8 L8 rc=$? at $(( $(date +%s) - t0 )) s"; grep '"model"' $OUT/torch_fp8_L8.log | cut -c1-400
