#!/usr/bin/env bash
# GPU call 7 (session 10): ncu of the Mamba kernels at Nemotron's mixer shape after the tensor-core products.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
for k in mamba_state_pass mamba_chunk_output mamba_chunk_backward; do
  STEPC_MAMBA_BENCH=1 timeout 100 /usr/local/cuda/bin/ncu --set full -k regex:"^$k\$" --launch-count 1 build/tests/gpu/gpu_kernels --only mamba --bench-only > $OUT/ncu_$k.txt 2>&1; echo "== $k rc=$?"
  grep -E "^  mamba_|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|L2 Hit|L1/TEX Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc A|Mem Busy|Max Bandwidth|Memory Throughput" $OUT/ncu_$k.txt | head -24
  grep -E "Est\. (Local )?Speedup" -A2 $OUT/ncu_$k.txt | grep -v "^--" | cut -c1-150 | head -24
done
