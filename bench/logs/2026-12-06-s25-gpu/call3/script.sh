#!/usr/bin/env bash
# session 25: on an H200, Nemotron-9 beside torch_hybrid.py compile (+ profile, + --gemm-tuning 8), then c28.sh;
# on an H100, c28.sh alone
set -u
export T0=$(date +%s)
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 100000 ]; then
  export XDG_CACHE_HOME=/tmp/stepc-xdg
  B=gpuwork/build; L=/tmp/nlogs; mkdir -p $L; S=$OUT/nemo_summary.txt
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
  t0=$(date +%s)
  NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
  timeout 100 $B/stepc run $NEMO --device cuda --steps 8 --json > $L/nemo.json 2> $L/nemo.err
  echo "nemo rc=$? $(( $(date +%s)-t0 ))s" >> $S; tail -2 $L/nemo.err >> $S
  python3 -c "import json;r=json.load(open('$L/nemo.json'));print('nemo', [s.get('ms') for s in r['steps']], r.get('measure'))" >> $S 2>&1
  timeout 100 $B/stepc run $NEMO --device cuda --steps 8 --json --gemm-tuning 8 > $L/nemo_t.json 2> $L/nemo_t.err
  echo "nemo tuned rc=$? $(( $(date +%s)-t0 ))s" >> $S; tail -2 $L/nemo_t.err >> $S
  python3 -c "import json;r=json.load(open('$L/nemo_t.json'));print('nemo tuned', [s.get('ms') for s in r['steps']], r.get('measure'))" >> $S 2>&1
  PYTHONUNBUFFERED=1 timeout 120 python3 gpuwork/torch_hybrid.py --layers 9 --variants compile:none --out $L/hyb.jsonl > $L/hyb.log 2>&1
  echo "hyb rc=$? $(( $(date +%s)-t0 ))s" >> $S; cat $L/hyb.jsonl >> $S 2>/dev/null; tail -2 $L/hyb.log >> $S
  timeout 60 $B/stepc run $NEMO --device cuda --steps 3 --profile --timeline $L/nemo_tl.json > $L/nemo_prof.txt 2>&1; echo "prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
  sed -n "/^class/,/^total/p" $L/nemo_prof.txt >> $S; grep -E "^step|max allocated" $L/nemo_prof.txt >> $S
  (cd /tmp && tar czf $OUT/nlogs.tgz nlogs)
fi
bash gpuwork/c30.sh
