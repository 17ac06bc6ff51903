#!/usr/bin/env bash
# GPU call (session 11): the layouts at real sizes with the ranks sharing the H200 (host-staged):
# models/bench_m.lua (shape M) at TP 2 + SP, models/moonlight_mha_7l.lua (MoE7) at EP 2, each
# rank's peak against its plan and the first steps' losses against one rank; tiny_mla at TP 2 + SP.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/big; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
NF="model.check_for_nan_in_loss_and_grad=false"
B() { local d=$1 r=$2; shift 2; build/stepc build $r $NF "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
B mla_one tests/recipes/tiny_mla.lua model.bf16=true
B mla_sp2 tests/recipes/tiny_mla.lua model.bf16=true model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true
B m_one models/bench_m.lua
B m_sp2 models/bench_m.lua model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true
B moe_one models/moonlight_mha_7l.lua train.global_batch_size=2
B moe_ep2 models/moonlight_mha_7l.lua model.expert_model_parallel_size=2 train.world_size=2 train.global_batch_size=2
echo "built at $(( $(date +%s) - t0 )) s"
run1() { timeout 200 $T/$1/train --device cuda --graph-mode $2 --steps $3 --json $([ "${SAVE:-1}" = 1 ] && echo --save $T/ck_$4) > $T/$4.json 2> $OUT/logs/$4.err; echo "$4 rc=$? at $(( $(date +%s) - t0 )) s $(tail -1 $OUT/logs/$4.err)"; }
port=30050
runN() { local n=$1 d=$2 m=$3 s=$4 o=$5; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 300 $T/$d/train --device cuda --graph-mode $m --steps $s --json $([ "${SAVE:-1}" = 1 ] && echo --save $T/ck_$o) > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 mla_one eager 8 mla_one_e; runN 2 mla_sp2 eager 8 mla_sp2_e; runN 2 mla_sp2 full_iteration 8 mla_sp2_g
SAVE=0
run1 m_one eager 3 m_one_e; runN 2 m_sp2 eager 3 m_sp2_e
run1 moe_one eager 3 moe_one_e; runN 2 moe_ep2 eager 3 moe_ep2_e
for c in "mla_one_e mla_sp2_e" "mla_one_e mla_sp2_g" "m_one_e m_sp2_e" "moe_one_e moe_ep2_e"; do
  set -- $c; echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $T/$2.r0.json $T/$2.r1.json $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done > $OUT/compare.txt
cat $OUT/compare.txt
grep -h '"ms"' $T/m_sp2_e.r0.json $T/moe_ep2_e.r0.json | python3 -c "
import sys,json
for l in sys.stdin: d=json.loads(l); print(d['artifact'], [round(s['ms'],1) for s in d['steps']])"
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
