#!/usr/bin/env bash
# GPU call (session 11): dropout slices and SP positions on CUDA (ranks sharing the H200): tiny with
# attention + hidden dropout 0.1 (unfused attention) at TP 2 and TP 2 + SP, gpt3_tiny (learned
# positions, dropout, LayerNorm, biases, tied embeddings) at TP 2 + SP, each against one rank with the
# same dropout on the GPU (the ranks draw the one-rank step's Philox bits at their one-rank indices).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/drop; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
B() { local d=$1 r=$2; shift 2; build/stepc build $r model.bf16=true "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
DROP="model.attention_dropout=0.1 model.hidden_dropout=0.1 model.attention_backend=unfused"
TP="model.tensor_model_parallel_size=2 train.world_size=2"
B one models/tiny.lua $DROP; B tp2 models/tiny.lua $DROP $TP; B sp2 models/tiny.lua $DROP $TP model.sequence_parallel=true
B g3one tests/recipes/gpt3_tiny.lua; B g3sp2 tests/recipes/gpt3_tiny.lua $TP model.sequence_parallel=true
STEPS=8
run1() { timeout 120 $T/$1/train --device cuda --graph-mode $2 --steps $STEPS --json --save $T/ck_$3 > $T/$3.json 2> $OUT/logs/$3.err; echo "$3 rc=$? $(tail -1 $OUT/logs/$3.err)"; }
port=30250
runN() { local n=$1 d=$2 m=$3 o=$4; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 180 $T/$d/train --device cuda --graph-mode $m --steps $STEPS --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 one eager one_e; run1 g3one eager g3one_e
runN 2 tp2 eager tp2_e; runN 2 sp2 eager sp2_e; runN 2 sp2 full_iteration sp2_g; runN 2 g3sp2 eager g3sp2_e; runN 2 g3sp2 full_iteration g3sp2_g
for c in "one_e tp2_e" "one_e sp2_e" "one_e sp2_g" "g3one_e g3sp2_e" "g3one_e g3sp2_g"; do
  set -- $c; echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $T/$2.r0.json $T/$2.r1.json $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done > $OUT/compare.txt
cat $OUT/compare.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
