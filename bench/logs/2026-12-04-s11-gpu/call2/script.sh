#!/usr/bin/env bash
# GPU call 1 (session 11): tensor parallelism on CUDA with ranks sharing the H200 (host-staged
# collectives): the backend's own check, then models/tiny.lua bf16 one rank vs TP 2 / TP 2 + SP /
# TP 2 + SP + biases, eager, full-iteration graph and scoped, losses and every parameter after the steps.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/tp; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt 2>&1
if [ -x build/tests/gpu/coll_host_check ]; then
  timeout 60 build/tests/gpu/coll_host_check nccl 1 > $OUT/logs/coll_nccl1.txt 2>&1; echo "coll nccl 1 rc=$?"; grep -cE "PASS" $OUT/logs/coll_nccl1.txt; grep FAIL $OUT/logs/coll_nccl1.txt | head -5
  for n in 2 3; do timeout 90 build/tests/gpu/coll_host_check $n > $OUT/logs/coll_$n.txt 2>&1; echo "coll_host_check $n rc=$?"; grep -cE "PASS" $OUT/logs/coll_$n.txt; grep -E "FAIL" $OUT/logs/coll_$n.txt | head; done
fi
B() { local d=$1; shift; build/stepc build models/tiny.lua "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
TP="model.tensor_model_parallel_size=2 train.world_size=2"
B one; B one_b model.add_bias_linear=true
B tp2 $TP; B sp2 $TP model.sequence_parallel=true; B sp2b $TP model.sequence_parallel=true model.add_bias_linear=true
echo "built at $(( $(date +%s) - t0 )) s"
STEPS=8
run1() { timeout 120 $T/$1/train --device cuda --graph-mode $2 --steps $STEPS --json --save $T/ck_$3 > $T/$3.json 2> $OUT/logs/$3.err; echo "$3 rc=$?"; }
port=29650
runN() { port=$((port+1)); for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 180 $T/$1/train --device cuda --graph-mode $2 --steps $STEPS --json --save $T/ck_$3 > $T/$3.r$r.json 2> $OUT/logs/$3.r$r.err & done; wait; echo "$3 done"; tail -2 $OUT/logs/$3.r0.err; }
run1 one eager one_e; run1 one full_iteration one_g; run1 one_b eager oneb_e
runN tp2 eager tp2_e; runN tp2 full_iteration tp2_g; runN tp2 scoped tp2_s
runN sp2 eager sp2_e; runN sp2 full_iteration sp2_g
runN sp2b eager sp2b_e; runN sp2b full_iteration sp2b_g
echo "ran at $(( $(date +%s) - t0 )) s"
cp $T/*.json $OUT/logs/ 2>/dev/null
for c in "one_e tp2_e" "one_e tp2_g" "one_e tp2_s" "one_e sp2_e" "one_e sp2_g" "oneb_e sp2b_e" "oneb_e sp2b_g"; do
  set -- $c; echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $T/$2.r0.json $T/$2.r1.json $T/ck_$2 2>&1 | tail -16
done > $OUT/compare.txt
cat $OUT/compare.txt | grep -E "==|bitwise|largest|params|max allocated" | head -60
python3 - <<PY > $OUT/replay.txt
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
for a, b in [('tp2_e', 'tp2_g'), ('tp2_e', 'tp2_s'), ('sp2_e', 'sp2_g'), ('sp2b_e', 'sp2b_g'), ('one_e','one_g')]:
    for r in ('r0', 'r1') if a != 'one_e' else ('',):
        pa, pb = ('$T/%s.%s.json' % (a, r), '$T/%s.%s.json' % (b, r)) if r else ('$T/%s.json' % a, '$T/%s.json' % b)
        print(a, b, r, 'bitwise' if L(pa) == L(pb) else 'DIFFERENT')
PY
cat $OUT/replay.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
