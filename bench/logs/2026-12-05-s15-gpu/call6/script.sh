#!/usr/bin/env bash
# GPU call (session 15): M fp8 tensorwise (stepc, full-iteration, 15 steps x 2) beside torchao float8
# tensorwise and bf16 under torch.compile in the same call.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/s15e; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
F8="model.fp8=hybrid model.fp8_recipe=tensorwise model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false"
gpubuild/stepc build models/bench_m.lua $F8 -o $T/M > $OUT/logs/build_M.txt 2>&1 || echo "build M failed"
gpubuild/stepc build models/bench_m.lua $F8 model.fp8_param=true -o $T/Mp > $OUT/logs/build_Mp.txt 2>&1 || echo "build Mp failed"
echo "built at $(( $(date +%s) - t0 )) s"
for round in 1 2; do for s in M Mp; do
  timeout 100 $T/$s/train --device cuda --steps 15 --json > $T/${s}_$round.json 2> $OUT/logs/${s}_$round.err
  python3 -c "
import json,statistics; d=json.load(open('$T/${s}_$round.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']
print('$s fp8 round $round: median %.2f ms  max alloc %d  predicted %d (%+.4f%%)' % (statistics.median(ms), m['max_allocated_bytes'], m['predicted_peak_bytes'], 100.0*(m['max_allocated_bytes']/m['predicted_peak_bytes']-1)))" 2>&1 | tail -1
done; done | tee $OUT/ab.txt
echo "stepc done at $(( $(date +%s) - t0 )) s"
W=$(ls gpuwork/wheels/torchao-*.whl | head -1)
PYTHONUNBUFFERED=1 timeout 280 python3 gpuwork/torch_fp8.py --torchao-wheel $W --model M --peak --variants compile_fp8_tensorwise:none,compile:none --out $OUT/torch_fp8.jsonl > $OUT/torch_fp8_M.log 2>&1; echo "torch fp8 M rc=$? at $(( $(date +%s) - t0 )) s"; grep '"model"' $OUT/torch_fp8_M.log | cut -c1-400
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
