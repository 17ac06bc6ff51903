#!/usr/bin/env bash
# session 22 call 1: the Mamba sequential scans (checks + bench); on an H200 the Nemotron-9 step beside torch_hybrid.py, else the norm fix + step tests
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
left() { echo $(( 580 - ($(date +%s) - t0) )); }
STEPC_MAMBA_BENCH=1 timeout 60 $B/tests/gpu/gpu_kernels --no-bench --only mamba > $L/mamba.log 2>&1; echo "mamba rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -vE "^PASS" $L/mamba.log >> $S
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
  timeout 200 $B/stepc run $NEMO --device cuda --steps 8 --json > $L/nemo.json 2> $L/nemo.err
  echo "nemo rc=$? $(( $(date +%s)-t0 ))s" >> $S; tail -3 $L/nemo.err >> $S
  python3 -c "import json;r=json.load(open('$L/nemo.json'));m=r['measure'];print('nemo', [s.get('ms') for s in r['steps']], m)" >> $S 2>&1
  PYTHONUNBUFFERED=1 timeout $(( $(left) - 60 )) python3 gpuwork/torch_hybrid.py --layers 9 --out $L/hyb.jsonl > $L/hyb.log 2>&1
  echo "hyb rc=$? $(( $(date +%s)-t0 ))s" >> $S; cat $L/hyb.jsonl >> $S 2>/dev/null; tail -3 $L/hyb.log >> $S
  timeout $(( $(left) )) $B/stepc run $NEMO --device cuda --steps 3 --profile > $L/nemo_prof.txt 2>&1; echo "prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
else
  timeout 150 $B/tests/gpu/gpu_kernels --no-bench > $L/kernels.log 2>&1; echo "kernels rc=$? $(( $(date +%s)-t0 ))s" >> $S
  grep -E "^(FAIL|SKIP|FATAL)" $L/kernels.log | head -20 >> $S; grep -E "checks" $L/kernels.log | tail -3 >> $S
  BUILD=$B OUT=$L/step ONLY="mamba|hybrid" RUN_TIMEOUT=100 timeout $(( $(left) - 150 )) tests/gpu/run_step_tests.sh > $L/step_summary.txt 2>&1; echo "step rc=$? $(( $(date +%s)-t0 ))s" >> $S
  grep -E "^==|^--|FAIL|exit [1-9]" $L/step_summary.txt | cut -c1-160 >> $S
  BUILD=$B OUT=$L/dp timeout $(( $(left) )) tests/gpu/run_dp.sh > $L/dp_summary.txt 2>&1; echo "dp rc=$? $(( $(date +%s)-t0 ))s" >> $S
  tail -6 $L/dp_summary.txt >> $S
fi
cd /tmp && tar czf $OUT/logs.tgz logs
