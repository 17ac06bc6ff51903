#!/usr/bin/env bash
# GPU call 10 (session 10): Mamba shared-memory rows padded for bank-distinct fragment loads (worktree
# on main 2afd05d); Mamba kernel tests, step tests, Nemotron-9 + profile.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build && sed -i -e "s|/tmp/wt_pad/build|$PWD/build|" -e "s|/tmp/wt_pad|$PWD|" build/stepc-layout.txt
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
STEPC_MAMBA_BENCH=1 timeout 150 build/tests/gpu/gpu_kernels --only mamba > $OUT/kernels_mamba.txt 2>&1; echo "kernels mamba rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "FAIL|checks|^  (forward|backward)" $OUT/kernels_mamba.txt | head -40
mkdir -p $OUT/x
OUT=$OUT/x/steps ONLY='mamba' RUN_TIMEOUT=150 timeout 240 tests/gpu/run_step_tests.sh > $OUT/steps.txt 2>&1; echo "step tests rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^-- .*exit [^0]|FAIL" $OUT/steps.txt | head -20; grep -c "exit 0" $OUT/steps.txt
N9="model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 120 build/stepc run models/nemotron3_nano.lua $N9 --device cuda --steps 12 --json model.check_for_nan_in_loss_and_grad=false > $OUT/x/nemo9.json 2> $OUT/x/nemo9.err; echo "nemo9 rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json,statistics; d=json.load(open('$OUT/x/nemo9.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('nemo9', d['mode'], 'median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'], 'losses', [round(x['loss'],6) for x in d['steps'][:3]])" | tee $OUT/nemo9.txt
timeout 120 build/stepc run models/nemotron3_nano.lua $N9 --device cuda --steps 3 --profile model.check_for_nan_in_loss_and_grad=false > $OUT/nemo9_profile.txt 2>&1; echo "nemo9 profile rc=$?"; sed -n '/^class/,/^total/p' $OUT/nemo9_profile.txt
tar czf $OUT/logs.tgz -C $OUT x
echo "done at $(( $(date +%s) - t0 )) s"
