#!/usr/bin/env bash
# GPU call 5 (session 9): fp8 (current scaling) on the H200 — the step against the CPU's fp8 emulation,
# replay and recompute bitwise, M and L8 speed and memory beside torchao float8 under torch.compile.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
F8="model.fp8=hybrid model.fp8_recipe=tensorwise"
timeout 100 build/tests/gpu/gpu_step grads models/tiny.lua $F8 > $OUT/grads_fp8.txt 2>&1; echo "grads fp8 rc=$?"; grep -E "^(FAIL|PASS (loss|worst)|INFO)" $OUT/grads_fp8.txt | head; grep -E "^FAIL|rel_l2" $OUT/grads_fp8.txt | sort -t= -k2 | tail -4
timeout 100 build/tests/gpu/gpu_step replay models/tiny.lua 8 $F8 > $OUT/replay_fp8.txt 2>&1; echo "replay fp8 rc=$?"; grep -E "^(FAIL|PASS)" $OUT/replay_fp8.txt | head -4
timeout 100 build/tests/gpu/gpu_step recompute models/tiny.lua 3 $F8 > $OUT/recompute_fp8.txt 2>&1; echo "recompute fp8 rc=$?"; grep -E "^(FAIL|PASS)" $OUT/recompute_fp8.txt | head -4
echo "at $(( $(date +%s) - t0 )) s"
for v in "M bench_m" "L8 llama3_8b model.num_layers=8"; do set -- $v; name=$1; shift; rec=$1; shift
 for mode in bf16 fp8; do ov=""; [ $mode = fp8 ] && ov="$F8"
  timeout 150 build/stepc run models/$rec.lua "$@" $ov --device cuda --steps 15 --json model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false > $OUT/${name}_$mode.json 2> $OUT/${name}_$mode.err; echo "$name $mode rc=$?"
  python3 -c "
import json,statistics; d=json.load(open('$OUT/${name}_$mode.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('$name $mode median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'], 'loss', d['steps'][0]['loss'], d['steps'][-1]['loss'])" 2>&1 | tail -1
 done
done
timeout 100 build/stepc run models/bench_m.lua $F8 --device cuda --steps 3 --profile model.check_for_nan_in_loss_and_grad=false > $OUT/M_fp8_profile.txt 2>&1; sed -n '/^class/,/^total/p' $OUT/M_fp8_profile.txt
echo "stepc done at $(( $(date +%s) - t0 )) s"
W=$(ls gpuwork/wheels/torchao-*.whl | head -1)
PYTHONUNBUFFERED=1 timeout 240 python3 gpuwork/torch_fp8.py --torchao-wheel $W --model M --peak --variants compile:none,compile_fp8_tensorwise:none --out $OUT/torch_fp8.jsonl > $OUT/torch_fp8_M.log 2>&1; echo "torch fp8 M rc=$? at $(( $(date +%s) - t0 )) s"; tail -8 $OUT/torch_fp8_M.log
