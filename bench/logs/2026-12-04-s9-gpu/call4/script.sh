#!/usr/bin/env bash
# GPU call 4 (session 9): MoE routing kernels (warp top-k, coalesced aux loss, 16-byte permute rows),
# the Mamba workspace as a planned transient; MoE and Mamba step tests; MoE7 and Nemotron-9 with
# max allocated vs predicted; MoE7 profile timeline.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
timeout 200 build/stepc run models/moonlight_mha_7l.lua --device cuda --steps 15 --json model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false > $OUT/moe7.json 2> $OUT/moe7.err; echo "moe7 rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json,statistics; d=json.load(open('$OUT/moe7.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('moe7 median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'])"
timeout 200 build/stepc run models/moonlight_mha_7l.lua --device cuda --steps 4 --profile --timeline $OUT/moe7_timeline.json model.check_for_nan_in_loss_and_grad=false > $OUT/moe7_profile.txt 2>&1; echo "moe7 profile rc=$?"; grep -E "^(grouped|moe_routing|optimizer|activation|total)" $OUT/moe7_profile.txt
N9="model.hybrid_override_pattern=MEMEM*EME model.num_layers=9 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 200 build/stepc run models/nemotron3_nano.lua $N9 --device cuda --steps 12 --json model.check_for_nan_in_loss_and_grad=false > $OUT/nemo9.json 2> $OUT/nemo9.err; echo "nemo9 rc=$? at $(( $(date +%s) - t0 )) s"
python3 -c "
import json,statistics; d=json.load(open('$OUT/nemo9.json')); ms=[x['ms'] for x in d['steps'][3:]]; m=d['measure']; print('nemo9', d['mode'], 'median ms', statistics.median(ms), 'max alloc', m['max_allocated_bytes'], 'pred', m['predicted_peak_bytes'], 'losses', [round(x['loss'],6) for x in d['steps'][:3]])"
timeout 200 build/stepc run models/nemotron3_nano.lua $N9 --device cuda --steps 3 --profile model.check_for_nan_in_loss_and_grad=false > $OUT/nemo9_profile.txt 2>&1; echo "nemo9 profile rc=$?"; sed -n '/^class/,/^total/p' $OUT/nemo9_profile.txt
OUT=$OUT/steps ONLY='moe|mamba' RUN_TIMEOUT=200 timeout 300 tests/gpu/run_step_tests.sh > $OUT/steps.txt 2>&1; echo "step tests rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^-- .*exit [^0]|FAIL" $OUT/steps.txt | head -20; grep -c "exit 0" $OUT/steps.txt
