#!/usr/bin/env bash
# GPU call 3 (session 13, to run next session): Megatron's allgather token dispatcher under EP (29e9335)
# on ranks sharing the GPU (host-staged): tiny_mla_moe bf16 EP 2 / EP 4 allgather against one rank,
# eager and full-iteration (full = eager bitwise per rank), peak vs plan; the forced EP 1 allgather over
# NCCL at world 1 = the plain step; then the fp8 step tests (ONLY=fp8) on the fused amax.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/s13c; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
NF="model.check_for_nan_in_loss_and_grad=false"
B() { local d=$1 r=$2; shift 2; build/stepc build $r $NF "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
R=tests/recipes/tiny_mla_moe.lua AG=model.moe_token_dispatcher_type=allgather
B one $R model.bf16=true
B one8 $R model.bf16=true train.global_batch_size=8
B ag2 $R model.bf16=true $AG model.expert_model_parallel_size=2 train.world_size=2
B ag4 $R model.bf16=true $AG model.expert_model_parallel_size=4 train.world_size=4 train.global_batch_size=8
B agf $R model.bf16=true $AG train.force_parallel_lowering=true
echo "built at $(( $(date +%s) - t0 )) s"
run1() { local d=$1 m=$2 o=$3; shift 3; env "$@" timeout 100 $T/$d/train --device cuda --graph-mode $m --steps 8 --json --save $T/ck_$o > $T/$o.json 2> $OUT/logs/$o.err; echo "$o rc=$? $(tail -1 $OUT/logs/$o.err)"; }
port=32750
runN() { local n=$1 d=$2 m=$3 o=$4; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 150 $T/$d/train --device cuda --graph-mode $m --steps 8 --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 one eager one_e X=1; run1 one8 eager one8_e X=1
runN 2 ag2 eager ag2_e; runN 2 ag2 full_iteration ag2_g; runN 4 ag4 eager ag4_e
for g in eager full_iteration; do run1 agf $g agf_$g X=1; done
for c in "one_e ag2_e 2" "one_e ag2_g 2" "one8_e ag4_e 4"; do
  set -- $c; files=""; for r in $(seq 0 $(($3-1))); do files="$files $T/$2.r$r.json"; done
  echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $files $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done | tee $OUT/compare.txt
python3 - <<PY | tee -a $OUT/compare.txt
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
def P(p): d = json.load(open(p))['measure']; return '%+.4f%%' % (100.0 * (d['max_allocated_bytes'] / d['predicted_peak_bytes'] - 1))
for r in range(2): print('ag2 rank', r, 'full == eager:', L('$T/ag2_g.r%d.json' % r) == L('$T/ag2_e.r%d.json' % r), 'peak', P('$T/ag2_e.r%d.json' % r))
print('forced allgather full == eager:', L('$T/agf_full_iteration.json') == L('$T/agf_eager.json'), ' vs plain:', L('$T/agf_eager.json')[:2], L('$T/one_e.json')[:2])
PY
ONLY=fp8 OUT=$OUT/fp8_steps BUILD=build timeout 300 tests/gpu/run_step_tests.sh > $OUT/fp8_steps.txt 2>&1; echo "fp8 step tests rc=$?"; tail -3 $OUT/fp8_steps.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
