#!/usr/bin/env bash
# session 22, H100: Mamba mixer timings (HEAD, chunk backward reading u, scan forward without C B^T) and ncu --set full at Nemotron's shape
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
for k in gpu_kernels gpu_kernels_u gpu_kernels_noM gpu_kernels_cb; do
  STEPC_MAMBA_BENCH=1 timeout 60 $B/tests/gpu/$k --only mamba > $L/mamba_$k.log 2>&1; echo "mamba $k rc=$? $(( $(date +%s)-t0 ))s" >> $S
  grep -vE "^PASS" $L/mamba_$k.log >> $S
done
STEPC_MAMBA_BENCH=1 timeout 300 ncu --clock-control none --set full --import-source no --filter-mode per-launch-config -c 1 \
  -k regex:"mamba_scan_forward|mamba_scan_states|mamba_chunk_backward|mamba_conv_backward" \
  $B/tests/gpu/gpu_kernels_cb --only mamba > $L/ncu.txt 2>&1; echo "ncu rc=$? $(( $(date +%s)-t0 ))s" >> $S
BUILD=$B OUT=$L/step ONLY="mamba" RUN_TIMEOUT=100 timeout 200 tests/gpu/run_step_tests.sh > $L/step_summary.txt 2>&1; echo "step rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "^--|FAIL" $L/step_summary.txt | cut -c1-160 >> $S
cd /tmp && tar czf $OUT/logs.tgz logs
