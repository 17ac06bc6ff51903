#!/usr/bin/env bash
# GPU call 1 (session 10): the grouped wgrad kernels write their gradients' norm partials (fuse.c
# fuse_wgrad_norm); kernel tests, MoE step tests, MoE7 beside torch.compile, MoE7 profile,
# Nemotron-9; ncu on the Mamba kernels if the machine has it.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
timeout 150 build/tests/gpu/gpu_kernels --only basic > $OUT/kernels_basic.txt 2>&1; echo "kernels basic rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "FAIL|grouped|checks" $OUT/kernels_basic.txt | head -40
OUT=$OUT/steps ONLY='moe' RUN_TIMEOUT=150 timeout 240 tests/gpu/run_step_tests.sh > $OUT/steps.txt 2>&1; echo "step tests rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^-- .*exit [^0]|FAIL" $OUT/steps.txt | head -20; grep -c "exit 0" $OUT/steps.txt
OUT=$OUT/bench SHAPES="MoE7" TORCH_STEP=gpuwork/torch_step.py TORCH_MOE=gpuwork/torch_moe.py timeout 200 bench/run_bench.sh > $OUT/bench.out 2>&1; echo "bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/bench/summary.txt
timeout 100 build/stepc run models/moonlight_mha_7l.lua --device cuda --steps 4 --profile model.check_for_nan_in_loss_and_grad=false > $OUT/moe7_profile.txt 2>&1; echo "moe7 profile rc=$?"; sed -n '/^class/,/^total/p' $OUT/moe7_profile.txt
N9="model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 120 build/stepc run models/nemotron3_nano.lua $N9 --device cuda --steps 12 --json model.check_for_nan_in_loss_and_grad=false > $OUT/nemo9.json 2> $OUT/nemo9.err; echo "nemo9 rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json,statistics; d=json.load(open('$OUT/nemo9.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('nemo9', d['mode'], 'median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'])"
ls /usr/local/cuda/bin 2>/dev/null | grep -E "^(ncu|nsys)$"; which ncu nsys 2>/dev/null
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ $(( $(date +%s) - t0 )) -lt 420 ]; then
  STEPC_MAMBA_BENCH=1 timeout 150 $NCU --section SpeedOfLight --section Occupancy --section LaunchStats -k regex:mamba_ --launch-count 12 build/tests/gpu/gpu_kernels --only mamba > $OUT/ncu_mamba.txt 2>&1; echo "ncu rc=$?"
  grep -E "mamba_|Duration|Throughput|Achieved Occupancy|Registers Per|Shared Memory Config" $OUT/ncu_mamba.txt | head -80
fi
echo "done at $(( $(date +%s) - t0 )) s"
