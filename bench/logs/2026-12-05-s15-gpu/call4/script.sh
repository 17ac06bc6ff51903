#!/usr/bin/env bash
# GPU call (session 15): s15a without s13c (gpu_kernels, zero_ep with the ranks' messages), then s15b
# (TP overlap = serial at M under deterministic_mode; overlap A/B timing over NCCL).
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
SKIP_S13C=1 bash gpuwork/s15a.sh 2>&1 | tail -25
echo "== s15b at $(( $(date +%s) - t0 )) s"
OUT=$OUT/b; mkdir -p $OUT; export OUT
timeout $(( 570 - ($(date +%s) - t0) )) bash gpuwork/s15b.sh 2>&1 | tail -20
echo "all done at $(( $(date +%s) - t0 )) s"
