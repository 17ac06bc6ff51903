#!/usr/bin/env bash
# session 22, H200: stepc L8 bf16 (fp8/bf16 ratio), M and M deterministic beside torch_step.py M (issue 27)
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs2; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
OUT=$L/bench BUILD=$B SHAPES="M" STEPS=15 TORCH_STEP=gpuwork/torch_step.py EXTRA="L8:L8:;M_det:M:model.deterministic_mode=true" timeout 330 bench/run_bench.sh > $L/bench_out.txt 2>&1
echo "done rc=$? $(( $(date +%s)-t0 ))s" >> $S
cat $L/bench/summary.txt >> $S
cd /tmp && tar czf $OUT/logs.tgz logs2
