#!/usr/bin/env bash
# GPU call 8 (session 12): a real-size EP layout with the all-to-all exchange: models/moonlight_mha_7l.lua
# (MoE7) at EP 2, two ranks sharing the H200 (host-staged), global batch 2, 1 step eagerly: each rank's
# peak against its plan (the op workspace is now 2 R rows, was EP x the input).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/s12h; rm -rf $T; mkdir -p $T
t0=$(date +%s)
build/stepc build models/moonlight_mha_7l.lua model.check_for_nan_in_loss_and_grad=false model.expert_model_parallel_size=2 train.world_size=2 train.global_batch_size=2 -o $T/ep2 > $OUT/build.txt 2>&1 || tail -3 $OUT/build.txt
echo "built at $(( $(date +%s) - t0 )) s"
for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=30951 STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 170 $T/ep2/train --device cuda --graph-mode eager --steps 1 --json > $OUT/ep2.r$r.json 2> $OUT/ep2.r$r.err & done; wait
echo "ran at $(( $(date +%s) - t0 )) s"
python3 - <<PY | tee $OUT/summary.txt
import json
for r in (0, 1):
    try:
        d = json.load(open('$OUT/ep2.r%d.json' % r)); m = d['measure']
        print('MoE7 EP2 rank', r, 'loss', d['steps'][0]['loss'], 'ms', round(d['steps'][0]['ms']), 'max allocated %d predicted %d (%+.4f%%)' % (m['max_allocated_bytes'], m['predicted_peak_bytes'], 100.0*(m['max_allocated_bytes']-m['predicted_peak_bytes'])/m['predicted_peak_bytes']))
    except Exception as e: print('rank', r, 'failed', e, open('$OUT/ep2.r%d.err' % r).read()[-400:])
PY
