#!/usr/bin/env bash
# GPU call 11 (session 10): a Mamba layer's forward + backward (+ its AdamW) beside the anchor's
# compiled one: steps of the patterns M and MMM (Nemotron's shape, seq 8192), stepc and
# torch_hybrid.py torch.compile; per layer = (MMM - M) / 2.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
for p in M MMM; do
  n=${#p}
  timeout 60 build/stepc run models/nemotron3_nano.lua model.hybrid_override_pattern=$p model.num_layers=$n model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1 --device cuda --steps 12 --json model.check_for_nan_in_loss_and_grad=false > $OUT/stepc_$p.json 2> $OUT/stepc_$p.err
  python3 -c "
import json,statistics; d=json.load(open('$OUT/stepc_$p.json')); ms=[x['ms'] for x in d['steps'][3:]]; print('stepc $p', d['mode'], 'median ms %.3f' % statistics.median(ms))" | tee -a $OUT/summary.txt
done
echo "stepc done at $(( $(date +%s) - t0 )) s"
for p in M MMM; do
  ( cd gpuwork && PYTHONUNBUFFERED=1 timeout 90 python3 torch_hybrid.py --pattern $p --variants compile:none --out $OUT/torch_$p.jsonl > $OUT/torch_$p.log 2>&1 )
  python3 -c "
import json; d=[json.loads(l) for l in open('$OUT/torch_$p.jsonl')][-1]; print('torch compile $p median ms', d.get('step_ms'), 'ok', d.get('ok'))" | tee -a $OUT/summary.txt
  echo "torch $p at $(( $(date +%s) - t0 )) s"
done
