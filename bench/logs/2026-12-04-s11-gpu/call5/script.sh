#!/usr/bin/env bash
# GPU call (session 11): multi-latent attention under TP 2 (ranks sharing the H200): tests/recipes/
# tiny_mla.lua bf16, flash (padded v) and fused (cuDNN, v as is), with and without q_lora_rank.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/mla; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
R=tests/recipes/tiny_mla.lua
B() { local d=$1; shift; build/stepc build $R model.bf16=true "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
TP="model.tensor_model_parallel_size=2 train.world_size=2"
B one; B tp2 $TP; B one_nq model.q_lora_rank=null; B tp2_nq $TP model.q_lora_rank=null
B one_f model.attention_backend=fused; B tp2_f $TP model.attention_backend=fused
echo "built at $(( $(date +%s) - t0 )) s"
STEPS=8
run1() { timeout 120 $T/$1/train --device cuda --graph-mode $2 --steps $STEPS --json --save $T/ck_$3 > $T/$3.json 2> $OUT/logs/$3.err; echo "$3 rc=$? $(tail -1 $OUT/logs/$3.err)"; }
port=29950
runN() { local n=$1 d=$2 m=$3 o=$4; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 180 $T/$d/train --device cuda --graph-mode $m --steps $STEPS --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 one eager one_e; run1 one_nq eager onenq_e; run1 one_f eager onef_e
runN 2 tp2 eager tp2_e; runN 2 tp2 full_iteration tp2_g
runN 2 tp2_nq eager tp2nq_e; runN 2 tp2_f eager tp2f_e; runN 2 tp2_f full_iteration tp2f_g
for c in "one_e tp2_e" "one_e tp2_g" "onenq_e tp2nq_e" "onef_e tp2f_e" "onef_e tp2f_g"; do
  set -- $c; echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $T/$2.r0.json $T/$2.r1.json $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done > $OUT/compare.txt
cat $OUT/compare.txt
python3 - <<PY
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
for a, b in [('tp2_e', 'tp2_g'), ('tp2f_e', 'tp2f_g')]:
    print(a, b, ['bitwise' if L('$T/%s.r%d.json' % (a, r)) == L('$T/%s.r%d.json' % (b, r)) else 'DIFFERENT' for r in range(2)])
PY
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
