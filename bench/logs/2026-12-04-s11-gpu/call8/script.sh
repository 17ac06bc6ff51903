#!/usr/bin/env bash
# GPU call (session 11): MoE under TP (SP, ETP 1) with the ranks sharing the H200: tiny_mla_moe bf16
# at TP 2, TP 2 x EP 2 (eager, full-iteration), TP 2 x EP 2 x DP 2; moonlight_mla_7l at TP 2 x EP 4
# (4 ranks, global batch 2) against one rank, 2 steps, each rank's peak against its plan.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/moetp; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
NF="model.check_for_nan_in_loss_and_grad=false"
B() { local d=$1 r=$2; shift 2; build/stepc build $r $NF "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
TPE="model.tensor_model_parallel_size=2 model.sequence_parallel=true model.expert_tensor_parallel_size=1"
R=tests/recipes/tiny_mla_moe.lua
B one $R model.bf16=true
B tp2 $R model.bf16=true $TPE train.world_size=2
B tp2ep2 $R model.bf16=true $TPE model.expert_model_parallel_size=2 train.world_size=2
B tp2ep2dp2 $R model.bf16=true $TPE model.expert_model_parallel_size=2 train.world_size=4
B m7one models/moonlight_mla_7l.lua train.global_batch_size=2
B m7 models/moonlight_mla_7l.lua $TPE model.expert_model_parallel_size=4 train.world_size=4 train.global_batch_size=2
grep -h "peaks at" $OUT/logs/build_m7.txt
echo "built at $(( $(date +%s) - t0 )) s"
run1() { timeout 200 $T/$1/train --device cuda --graph-mode $2 --steps $3 --json $([ "${SAVE:-1}" = 1 ] && echo --save $T/ck_$4) > $T/$4.json 2> $OUT/logs/$4.err; echo "$4 rc=$? at $(( $(date +%s) - t0 )) s $(tail -1 $OUT/logs/$4.err)"; }
port=30150
runN() { local n=$1 d=$2 m=$3 s=$4 o=$5; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 400 $T/$d/train --device cuda --graph-mode $m --steps $s --json $([ "${SAVE:-1}" = 1 ] && echo --save $T/ck_$o) > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 one eager 8 one_e
runN 2 tp2 eager 8 tp2_e; runN 2 tp2ep2 eager 8 tp2ep2_e; runN 2 tp2ep2 full_iteration 8 tp2ep2_g; runN 4 tp2ep2dp2 eager 8 tp2ep2dp2_e
SAVE=0
run1 m7one eager 2 m7one_e; runN 4 m7 eager 2 m7_e
for c in "one_e tp2_e 2" "one_e tp2ep2_e 2" "one_e tp2ep2_g 2" "one_e tp2ep2dp2_e 4" "m7one_e m7_e 4"; do
  set -- $c; files=""; for r in $(seq 0 $(($3-1))); do files="$files $T/$2.r$r.json"; done
  echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $files $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done > $OUT/compare.txt
cat $OUT/compare.txt
python3 - <<PY
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
print('tp2ep2 full vs eager', ['bitwise' if L('$T/tp2ep2_e.r%d.json' % r) == L('$T/tp2ep2_g.r%d.json' % r) else 'DIFFERENT' for r in range(2)])
d = json.load(open('$T/m7_e.r0.json')); print('m7 step ms', [round(s['ms']) for s in d['steps']])
PY
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
