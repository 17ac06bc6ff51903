#!/usr/bin/env bash
# GPU call (session 15): branch h-tg (main gradients transient with one micro-batch): M bf16 and M fp8
# tensorwise + fp8_param, full-iteration, 10 steps: step time, max allocated vs the plan's peak.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild_tg build
for d in /work/main /work/h-tg; do [ -e $d ] || { mkdir -p /work && ln -s "$PWD" $d; }; done
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache-tg
T=/tmp/s15f; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
F8="model.fp8=hybrid model.fp8_recipe=tensorwise model.fp8_param=true"
C="model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false"
build/stepc build models/bench_m.lua $C $F8 -o $T/Mp > $OUT/logs/build_Mp.txt 2>&1 || { echo "build Mp failed"; tail -3 $OUT/logs/build_Mp.txt; }
build/stepc build models/bench_m.lua $C -o $T/M > $OUT/logs/build_M.txt 2>&1 || { echo "build M failed"; tail -3 $OUT/logs/build_M.txt; }
echo "built at $(( $(date +%s) - t0 )) s"
for s in Mp M; do
  timeout 100 $T/$s/train --device cuda --steps 10 --json > $T/$s.json 2> $OUT/logs/$s.err; echo "$s rc=$?"
  python3 -c "
import json,statistics; d=json.load(open('$T/$s.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']
print('h-tg $s: median %.2f ms  max alloc %d  predicted %d (%+.4f%%)  losses %s' % (statistics.median(ms), m['max_allocated_bytes'], m['predicted_peak_bytes'], 100.0*(m['max_allocated_bytes']/m['predicted_peak_bytes']-1), [round(x['loss'],5) for x in d['steps'][:3]]))" 2>&1 | tail -1
done | tee $OUT/tg.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
