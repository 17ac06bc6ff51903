#!/usr/bin/env bash
# GPU call 9 (session 10): Nemotron-9 (main after call 8) beside torch_hybrid.py's torch.compile step, same call.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
N9="model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 120 build/stepc run models/nemotron3_nano.lua $N9 --device cuda --steps 15 --json model.check_for_nan_in_loss_and_grad=false > $OUT/nemo9.json 2> $OUT/nemo9.err; echo "nemo9 rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json,statistics; d=json.load(open('$OUT/nemo9.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('nemo9', d['mode'], 'median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'])"
( cd gpuwork && PYTHONUNBUFFERED=1 timeout 240 python3 torch_hybrid.py --layers 9 --variants compile:none --out $OUT/hybrid.jsonl > $OUT/hybrid.log 2>&1; echo "torch rc=$? at $(( $(date +%s) - t0 )) s" ); cut -c1-500 $OUT/hybrid.jsonl 2>/dev/null
