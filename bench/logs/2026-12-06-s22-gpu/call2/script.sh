#!/usr/bin/env bash
# session 22, H100: ncu of the Mamba scans and chunk backward (what bounds them); M determinism variants beside torch.compile
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
STEPC_MAMBA_BENCH=1 timeout 120 ncu --clock-control none --set full -k regex:"mamba_scan_forward|mamba_scan_states|mamba_chunk_backward" -c 3 \
  $B/tests/gpu/gpu_kernels --bench-only --only mamba > $L/ncu.txt 2>&1; echo "ncu rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "mamba_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|DRAM Throughput|Block Limit" $L/ncu.txt | head -80 >> $S
OUT=$L/bench BUILD=$B SHAPES="M" STEPS=15 TORCH_STEP=gpuwork/torch_step.py EXTRA="M_det:M:model.deterministic_mode=true;M_flash:M:model.attention_backend=flash;M_detflash:M:model.deterministic_mode=true model.attention_backend=flash" timeout $(( $(left) )) bench/run_bench.sh > $L/bench_out.txt 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s" >> $S; cat $L/bench/summary.txt >> $S 2>/dev/null
cd /tmp && tar czf $OUT/logs.tgz logs
