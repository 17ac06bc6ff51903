#!/usr/bin/env bash
# GPU call 4 (session 10): moe_act 16-byte rows, idle warpgroups of an expert's last row tile skip
# their wgmma; kernel tests, MoE step tests, MoE7 beside torch.compile (bench), MoE7 profile,
# Nemotron-9; ncu source counters of two Mamba kernels (tarred).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
timeout 150 build/tests/gpu/gpu_kernels --only basic > $OUT/kernels_basic.txt 2>&1; echo "kernels basic rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "FAIL|INFO grouped|checks" $OUT/kernels_basic.txt | head -40
mkdir -p $OUT/x
OUT=$OUT/x/steps ONLY='moe' RUN_TIMEOUT=150 timeout 240 tests/gpu/run_step_tests.sh > $OUT/steps.txt 2>&1; echo "step tests rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^-- .*exit [^0]|FAIL" $OUT/steps.txt | head -20; grep -c "exit 0" $OUT/steps.txt
OUT=$OUT/x/bench SHAPES="MoE7" TORCH_STEP=gpuwork/torch_step.py TORCH_MOE=gpuwork/torch_moe.py timeout 200 bench/run_bench.sh > $OUT/x/bench.out 2>&1; echo "bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/x/bench/summary.txt; cp $OUT/x/bench/summary.txt $OUT/bench_summary.txt
timeout 100 build/stepc run models/moonlight_mha_7l.lua --device cuda --steps 4 --profile model.check_for_nan_in_loss_and_grad=false > $OUT/moe7_profile.txt 2>&1; echo "moe7 profile rc=$?"; sed -n '/^class/,/^total/p' $OUT/moe7_profile.txt
N9="model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 120 build/stepc run models/nemotron3_nano.lua $N9 --device cuda --steps 12 --json model.check_for_nan_in_loss_and_grad=false > $OUT/x/nemo9.json 2> $OUT/x/nemo9.err; echo "nemo9 rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json,statistics; d=json.load(open('$OUT/x/nemo9.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('nemo9', d['mode'], 'median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'])" | tee $OUT/nemo9.txt
for k in mamba_chunk_output mamba_chunk_backward; do
  STEPC_MAMBA_BENCH=1 timeout 90 /usr/local/cuda/bin/ncu --section SourceCounters --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis -k regex:"^$k\$" --launch-count 1 build/tests/gpu/gpu_kernels --only mamba --bench-only > $OUT/x/ncu_$k.txt 2>&1; echo "ncu $k rc=$? at $(( $(date +%s) - t0 )) s"
done
tar czf $OUT/logs.tgz -C $OUT x
echo "done at $(( $(date +%s) - t0 )) s"
