#!/usr/bin/env bash
# session 23, H100 (main 4df9a22's kernels: the router staged in registers, the dispatch unrolled): the MoE, MLA, Mamba and fp8-MoE step tests again
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $S
t0=$(date +%s)
BUILD=$B OUT=$L/step ONLY="moe|mla|mamba|hybrid" RUN_TIMEOUT=100 timeout 160 tests/gpu/run_step_tests.sh > $L/step_summary.txt 2>&1; echo "step rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "^--|FAIL" $L/step_summary.txt | cut -c1-160 >> $S
