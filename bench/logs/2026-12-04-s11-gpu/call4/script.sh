#!/usr/bin/env bash
# GPU call (session 11): expert parallelism on CUDA with the ranks on the one H200 (host-staged
# exchange): tiny_mla_moe bf16, one rank vs EP 2 (dropless, capacity 1.0) and EP 2 x expert-DP 2,
# eager and full-iteration; a rank killed mid-run (TP 2).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/ep; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
R=tests/recipes/tiny_mla_moe.lua
B() { local d=$1; shift; build/stepc build $R model.bf16=true "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
CAP="model.moe_expert_capacity_factor=1.0"
B one; B one_cap $CAP; B one8 train.global_batch_size=8
B ep2 model.expert_model_parallel_size=2 train.world_size=2
B ep2cap model.expert_model_parallel_size=2 train.world_size=2 $CAP
B ep2dp2 model.expert_model_parallel_size=2 train.world_size=4 train.global_batch_size=8
R=models/tiny.lua B tp2 model.tensor_model_parallel_size=2 train.world_size=2
echo "built at $(( $(date +%s) - t0 )) s"
STEPS=${STEPS:-8}
run1() { timeout 120 $T/$1/train --device cuda --graph-mode $2 --steps $STEPS --json --save $T/ck_$3 > $T/$3.json 2> $OUT/logs/$3.err; echo "$3 rc=$? $(tail -1 $OUT/logs/$3.err)"; }
port=29850
runN() { local n=$1 d=$2 m=$3 o=$4; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 180 $T/$d/train --device cuda --graph-mode $m --steps $STEPS --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 one eager one_e; run1 one_cap eager onecap_e; run1 one8 eager one8_e
runN 2 ep2 eager ep2_e; runN 2 ep2 full_iteration ep2_g
runN 2 ep2cap eager ep2cap_e; runN 2 ep2cap full_iteration ep2cap_g
runN 4 ep2dp2 eager ep2dp2_e; runN 4 ep2dp2 full_iteration ep2dp2_g
echo "ran at $(( $(date +%s) - t0 )) s"
for c in "one_e ep2_e 2" "one_e ep2_g 2" "onecap_e ep2cap_e 2" "onecap_e ep2cap_g 2" "one8_e ep2dp2_e 4" "one8_e ep2dp2_g 4"; do
  set -- $c; files=""; for r in $(seq 0 $(($3-1))); do files="$files $T/$2.r$r.json"; done
  echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $files $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done > $OUT/compare.txt
cat $OUT/compare.txt
python3 - <<PY > $OUT/replay.txt
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
for a, b, n in [('ep2_e', 'ep2_g', 2), ('ep2cap_e', 'ep2cap_g', 2), ('ep2dp2_e', 'ep2dp2_g', 4)]:
    print(a, b, ['bitwise' if L('$T/%s.r%d.json' % (a, r)) == L('$T/%s.r%d.json' % (b, r)) else 'DIFFERENT' for r in range(n)])
PY
cat $OUT/replay.txt
# a rank killed mid-run: the other stops with an error naming the collective, no hang
port=$((port+1))
for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  $T/tp2/train --device cuda --graph-mode full_iteration --steps 100000 > $OUT/logs/kill.r$r.out 2> $OUT/logs/kill.r$r.err & pids[$r]=$!; done
sleep 6; k0=$(date +%s); kill -9 ${pids[1]}
for i in $(seq 1 60); do kill -0 ${pids[0]} 2>/dev/null || break; sleep 1; done
kill -0 ${pids[0]} 2>/dev/null && { echo "kill: rank 0 still running after 60 s"; kill -9 ${pids[0]}; }
wait ${pids[0]}; rc=$?; echo "kill: rank 0 exit $rc within $(( $(date +%s) - k0 )) s; steps it ran: $(grep -c '^step' $OUT/logs/kill.r0.out)"; tail -1 $OUT/logs/kill.r0.err
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
