#!/usr/bin/env bash
# GPU call 3 (session 9): grouped wgrad stored into the main gradient (one micro-batch), one wgmma group in flight; MoE step tests; MoE7 and Nemotron-9 steps
# timing; the MoE and optimizer whole-step tests; MoE7 and M steps (AdamW with two vectors in flight).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
timeout 200 build/tests/gpu/gpu_kernels --only basic > $OUT/basic.txt 2>&1; echo "basic rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "FAIL|checks|grouped" $OUT/basic.txt | head -30
for m in moonlight_mha_7l; do
timeout 200 build/stepc run models/$m.lua --device cuda --steps 15 --json model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false > $OUT/$m.json 2> $OUT/$m.err; echo "$m rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json,statistics,sys; d=json.load(open('$OUT/$m.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('$m', 'median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'])"
done
timeout 200 build/stepc run models/moonlight_mha_7l.lua --device cuda --steps 4 --profile model.check_for_nan_in_loss_and_grad=false > $OUT/moe7_profile.txt 2>&1; echo "moe7 profile rc=$?"; grep -E "^(grouped|optimizer|total)" $OUT/moe7_profile.txt
N9="model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 200 build/stepc run models/nemotron3_nano.lua $N9 --device cuda --steps 12 --json model.check_for_nan_in_loss_and_grad=false > $OUT/nemo9.json 2> $OUT/nemo9.err; echo "nemo9 rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json,statistics; d=json.load(open('$OUT/nemo9.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('nemo9', d['mode'], 'median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'])"
OUT=$OUT/steps ONLY='moe|optim|mamba' RUN_TIMEOUT=200 timeout 330 tests/gpu/run_step_tests.sh > $OUT/steps.txt 2>&1; echo "step tests rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^-- |FAIL" $OUT/steps.txt | head -40
