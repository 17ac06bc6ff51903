#!/usr/bin/env bash
# GPU call 5 (session 12): fp8 delayed scaling (merge 8ce3eb0 of h-fp8d) on the H200, the checks its
# author listed: the fp8 kernels (casts, the delayed update) exactly, the fp8 step tests (both
# recipes: grads against the CPU emulation, replay, recompute, scoped, resume, the CLI eager and
# full-iteration), stepc_eval on cuda, and M's step time with delayed beside tensorwise.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
ONLY=fp8 GPL3=gpuwork/text.txt OUT=$OUT/steps timeout 400 tests/gpu/run_step_tests.sh > $OUT/step_tests.txt 2>&1; echo "fp8 step tests rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^-- |^FAIL|checks" $OUT/step_tests.txt | head -40
timeout 100 build/tests/api/test_eval cuda > $OUT/test_eval.txt 2>&1; echo "test_eval cuda rc=$? $(tail -1 $OUT/test_eval.txt)"
NF="model.check_for_nan_in_loss_and_grad=false"
for r in tensorwise delayed; do timeout 100 build/stepc run models/bench_m.lua --device cuda --steps 15 --json model.fp8=hybrid model.fp8_recipe=$r $NF > $OUT/m_$r.json 2> $OUT/m_$r.err; echo "M $r rc=$? at $(( $(date +%s) - t0 )) s"; done
python3 - <<PY | tee $OUT/summary.txt
import json
for r in ('tensorwise', 'delayed'):
    try:
        d = json.load(open('$OUT/m_%s.json' % r)); ms = sorted(s['ms'] for s in d['steps'][5:]); m = d['measure']
        print('M fp8 %s: median %.2f ms (steps 6-15), losses %s, max allocated %d predicted %d (%+.4f%%)' % (r, ms[len(ms)//2], [round(s['loss'], 4) for s in d['steps'][:3]], m['max_allocated_bytes'], m['predicted_peak_bytes'], 100.0*(m['max_allocated_bytes']-m['predicted_peak_bytes'])/m['predicted_peak_bytes']))
    except Exception as e: print(r, 'failed', e)
PY
echo "done at $(( $(date +%s) - t0 )) s"
