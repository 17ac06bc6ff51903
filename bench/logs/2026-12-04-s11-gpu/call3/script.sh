#!/usr/bin/env bash
# GPU call (session 11): data parallelism and TP x DP with every rank on the one H200 (host-staged
# collectives: the gradient buckets too), against one rank; a rank killed mid-run.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/tp; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
B() { local d=$1; shift; build/stepc build models/tiny.lua "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
B one; B tp2 model.tensor_model_parallel_size=2 train.world_size=2
B dp2 train.world_size=2; B tp2dp2 model.tensor_model_parallel_size=2 train.world_size=4
B sp2dp2 model.tensor_model_parallel_size=2 train.world_size=4 model.sequence_parallel=true
echo "built at $(( $(date +%s) - t0 )) s"
STEPS=${STEPS:-8}
run1() { timeout 120 $T/$1/train --device cuda --graph-mode $2 --steps $STEPS --json --save $T/ck_$3 > $T/$3.json 2> $OUT/logs/$3.err; echo "$3 rc=$?"; }
port=29750
runN() { local n=$1 d=$2 m=$3 o=$4; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 180 $T/$d/train --device cuda --graph-mode $m --steps $STEPS --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 one eager one_e
runN 2 dp2 eager dp2_e; runN 2 dp2 full_iteration dp2_g
runN 4 tp2dp2 eager tp2dp2_e; runN 4 tp2dp2 full_iteration tp2dp2_g
runN 4 sp2dp2 eager sp2dp2_e; runN 4 sp2dp2 full_iteration sp2dp2_g
echo "ran at $(( $(date +%s) - t0 )) s"
for c in "dp2_e 2" "dp2_g 2" "tp2dp2_e 4" "tp2dp2_g 4" "sp2dp2_e 4" "sp2dp2_g 4"; do
  set -- $c; files=""; for r in $(seq 0 $(($2-1))); do files="$files $T/$1.r$r.json"; done
  echo "== $1 vs one_e"; python3 gpuwork/cmp_tp.py $T/one_e.json $T/ck_one_e $files $T/ck_$1 2>&1 | grep -vE "^step [2-7] "
done > $OUT/compare.txt
cat $OUT/compare.txt
python3 - <<PY > $OUT/replay.txt
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
for a, b, n in [('dp2_e', 'dp2_g', 2), ('tp2dp2_e', 'tp2dp2_g', 4), ('sp2dp2_e', 'sp2dp2_g', 4)]:
    print(a, b, ['bitwise' if L('$T/%s.r%d.json' % (a, r)) == L('$T/%s.r%d.json' % (b, r)) else 'DIFFERENT' for r in range(n)])
PY
cat $OUT/replay.txt
# a rank killed mid-run: the other stops with an error naming the collective, no hang
port=$((port+1))
for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 120 $T/tp2/train --device cuda --graph-mode full_iteration --steps 100000 > $OUT/logs/kill.r$r.out 2> $OUT/logs/kill.r$r.err & pids[$r]=$!; done
sleep 8; k0=$(date +%s); kill -9 ${pids[1]}; wait ${pids[0]}; rc=$?; echo "kill: rank 0 exit $rc after $(( $(date +%s) - k0 )) s; steps it ran: $(grep -c '^step' $OUT/logs/kill.r0.out)"; tail -2 $OUT/logs/kill.r0.err
wait
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
