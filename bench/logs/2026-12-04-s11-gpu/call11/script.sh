#!/usr/bin/env bash
# GPU call (session 11): a real-size layout in the full-iteration graph: models/bench_m.lua (M) at
# TP 2 + SP, two ranks on the one H200 (host-staged), eager and full-iteration, 4 steps each:
# replay = eager bitwise per rank, the per-rank peak against the plan.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/mfull; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
build/stepc build models/bench_m.lua model.check_for_nan_in_loss_and_grad=false model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true model.deterministic_mode=true -o $T/m_sp2 > $OUT/logs/build.txt 2>&1 || tail -3 $OUT/logs/build.txt
port=30350
runN() { local m=$1 o=$2; port=$((port+1)); for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 200 $T/m_sp2/train --device cuda --graph-mode $m --steps 4 --json > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
runN eager e; runN full_iteration g
python3 - <<PY | tee $OUT/summary.txt
import json
for r in (0, 1):
    a = json.load(open('$T/e.r%d.json' % r)); b = json.load(open('$T/g.r%d.json' % r))
    la = [(s['loss'], s['grad_norm']) for s in a['steps']]; lb = [(s['loss'], s['grad_norm']) for s in b['steps']]
    print('rank', r, 'full-iteration == eager:', 'bitwise' if la == lb else 'DIFFERENT', la[0], lb[0], 'graph steps', [s['graph'] for s in b['steps']])
    for d, n in ((a, 'eager'), (b, 'full')):
        m = d['measure']; print('  %s max allocated %d predicted %d (%+.5f%%) ms %s' % (n, m['max_allocated_bytes'], m['predicted_peak_bytes'], 100.0 * (m['max_allocated_bytes'] - m['predicted_peak_bytes']) / m['predicted_peak_bytes'], [round(s['ms']) for s in d['steps']]))
PY
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
