#!/usr/bin/env bash
# session 22: the Mamba kernels' in-range mma path and scan_states by cp.async (4 blocks an SM) against 05b1aeb, same call; Mamba step tests; on an H200 the Nemotron-9 step
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs3; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
for k in gpu_kernels_cb gpu_kernels_fast gpu_kernels; do
  STEPC_MAMBA_BENCH=1 timeout 60 $B/tests/gpu/$k --only mamba > $L/mamba_$k.log 2>&1; echo "mamba $k rc=$? $(( $(date +%s)-t0 ))s" >> $S
  grep -vE "^PASS|^kernels:|^device:" $L/mamba_$k.log >> $S
done
BUILD=$B OUT=$L/step ONLY="mamba" RUN_TIMEOUT=100 timeout 150 tests/gpu/run_step_tests.sh > $L/step_summary.txt 2>&1; echo "step rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "^--|FAIL" $L/step_summary.txt | cut -c1-160 >> $S
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
  timeout 90 $B/stepc run $NEMO --device cuda --steps 8 --json > $L/nemo.json 2> $L/nemo.err
  echo "nemo rc=$? $(( $(date +%s)-t0 ))s" >> $S
  python3 -c "import json;r=json.load(open('$L/nemo.json'));print('nemo', [s['ms'] for s in r['steps']], r['measure']['max_allocated_bytes'], r['measure']['predicted_peak_bytes'])" >> $S 2>&1
fi
cd /tmp && tar czf $OUT/logs.tgz logs3
