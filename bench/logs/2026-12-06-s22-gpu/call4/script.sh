#!/usr/bin/env bash
# session 22, H200: Mamba scans bench; Nemotron-9 beside torch_hybrid.py (compile); its profile; MoE7 beside torch_moe.py while time lasts
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
STEPC_MAMBA_BENCH=1 timeout 40 $B/tests/gpu/gpu_kernels --bench-only --only mamba > $L/mamba.log 2>&1; echo "mamba rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -vE "^PASS" $L/mamba.log >> $S
NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 150 $B/stepc run $NEMO --device cuda --steps 8 --json > $L/nemo.json 2> $L/nemo.err
echo "nemo rc=$? $(( $(date +%s)-t0 ))s" >> $S; tail -3 $L/nemo.err >> $S
python3 - >> $S 2>&1 <<PY
import json; r=json.load(open('$L/nemo.json'))
print('nemo keys', list(r.keys()))
st=r.get('steps',[]); print('nemo steps', [ (s.get('step'), s.get('ms'), s.get('loss')) for s in st])
print('nemo measure', r.get('measure'))
PY
PYTHONUNBUFFERED=1 timeout 230 python3 gpuwork/torch_hybrid.py --layers 9 --variants compile:none --out $L/hyb.jsonl > $L/hyb.log 2>&1
echo "hyb rc=$? $(( $(date +%s)-t0 ))s" >> $S; cat $L/hyb.jsonl >> $S 2>/dev/null; tail -3 $L/hyb.log >> $S
timeout 80 $B/stepc run $NEMO --device cuda --steps 3 --profile > $L/nemo_prof.txt 2>&1; echo "prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
if [ $(left) -gt 120 ]; then
  OUT=$L/bench BUILD=$B SHAPES="MoE7" STEPS=15 TORCH_MOE=gpuwork/torch_moe.py timeout $(( $(left) )) bench/run_bench.sh > $L/bench_out.txt 2>&1
  echo "moe rc=$? $(( $(date +%s)-t0 ))s" >> $S; cat $L/bench/summary.txt >> $S 2>/dev/null
fi
cd /tmp && tar czf $OUT/logs.tgz logs
