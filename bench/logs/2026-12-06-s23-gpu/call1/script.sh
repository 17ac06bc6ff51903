#!/usr/bin/env bash
# session 23, H200 (or H100 without the Nemotron part): fa4477f's Mamba kernels against 05b1aeb's in the same call; Mamba step tests (incl. mamba_train_gpl3); Nemotron-9 beside torch_hybrid.py compile; its profile
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
STEPC_MAMBA_BENCH=1 timeout 60 $B/tests/gpu/gpu_kernels_cb --bench-only --only mamba > $L/mamba_cb.log 2>&1; echo "mamba 05b1aeb rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -vE "^PASS" $L/mamba_cb.log >> $S
STEPC_MAMBA_BENCH=1 timeout 90 $B/tests/gpu/gpu_kernels --only mamba > $L/mamba.log 2>&1; echo "mamba fa4477f rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -vE "^PASS" $L/mamba.log >> $S
BUILD=$B OUT=$L/step ONLY="mamba|hybrid" RUN_TIMEOUT=120 timeout 200 tests/gpu/run_step_tests.sh > $L/step_summary.txt 2>&1; echo "step rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "^--|FAIL|PASS" $L/step_summary.txt | cut -c1-200 >> $S
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
  timeout 120 $B/stepc run $NEMO --device cuda --steps 8 --json > $L/nemo.json 2> $L/nemo.err
  echo "nemo rc=$? $(( $(date +%s)-t0 ))s" >> $S; tail -3 $L/nemo.err >> $S
  python3 -c "import json;r=json.load(open('$L/nemo.json'));print('nemo', [s.get('ms') for s in r['steps']], r.get('measure'))" >> $S 2>&1
  PYTHONUNBUFFERED=1 timeout 200 python3 gpuwork/torch_hybrid.py --layers 9 --variants compile:none --out $L/hyb.jsonl > $L/hyb.log 2>&1
  echo "hyb rc=$? $(( $(date +%s)-t0 ))s" >> $S; cat $L/hyb.jsonl >> $S 2>/dev/null; tail -3 $L/hyb.log >> $S
  timeout 80 $B/stepc run $NEMO --device cuda --steps 3 --profile > $L/nemo_prof.txt 2>&1; echo "prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
fi
cd /tmp && tar czf $OUT/logs.tgz logs
