#!/usr/bin/env bash
# session 26: Nemotron-9 on an H200 beside torch_hybrid.py compile (no profile: the budget)
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/nlogs; mkdir -p $L; S=$OUT/nemo_summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
[ "$mem" -gt 100000 ] || { echo "not an H200" >> $S; exit 0; }
NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 90 $B/stepc run $NEMO --device cuda --steps 8 --json > $L/nemo.json 2> $L/nemo.err
echo "nemo rc=$? $(el)s" >> $S; tail -2 $L/nemo.err >> $S
python3 -c "import json;r=json.load(open('$L/nemo.json'));print('nemo', [s.get('ms') for s in r['steps']], r.get('measure'))" >> $S 2>&1
PYTHONUNBUFFERED=1 timeout 120 python3 gpuwork/torch_hybrid.py --layers 9 --variants compile:none --out $L/hyb.jsonl > $L/hyb.log 2>&1
echo "hyb rc=$? $(el)s" >> $S; cat $L/hyb.jsonl >> $S 2>/dev/null; tail -2 $L/hyb.log >> $S
cd /tmp && tar czf $OUT/nlogs.tgz nlogs
