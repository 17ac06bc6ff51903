#!/usr/bin/env bash
# session 26 call 4 (H100): Nemotron-6 (MEMEM*, fits 80 GB) beside torch_hybrid.py compile; one Mamba layer (patterns M, MMM)
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/nlogs; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
for p in MEMEM* M MMM; do
  [ $(el) -lt 300 ] || break
  n=${#p}; tag=$(echo $p | tr '*' 'A')
  timeout 80 $B/stepc run models/nemotron3_nano.lua "model.hybrid_override_pattern=$p" model.num_layers=$n model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1 --device cuda --steps 8 --json > $L/p_$tag.json 2> $L/p_$tag.err
  echo "stepc $p rc=$? $(el)s" >> $S; tail -1 $L/p_$tag.err >> $S
  python3 -c "import json;r=json.load(open('$L/p_$tag.json'));print('stepc $p', [s.get('ms') for s in r['steps']], r.get('measure'))" >> $S 2>&1
  PYTHONUNBUFFERED=1 timeout 130 python3 gpuwork/torch_hybrid.py --pattern "$p" --variants compile:none --out $L/hyb_$tag.jsonl > $L/hyb_$tag.log 2>&1
  echo "hyb $p rc=$? $(el)s" >> $S; cat $L/hyb_$tag.jsonl >> $S 2>/dev/null; tail -1 $L/hyb_$tag.log >> $S
done
cd /tmp && tar czf $OUT/nlogs.tgz nlogs
