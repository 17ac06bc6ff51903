#!/usr/bin/env bash
# GPU call 4 (session 12): the all-to-all EP exchange (63e9146). (a) tests/gpu/coll_host_check: every
# collective incl. all-to-all, host-staged on 2 and 3 processes and over NCCL at world size 1;
# (b) tiny_mla_moe bf16 against one rank: EP 2 dropless (eager, full-iteration), EP 2 capacity 1.0,
# EP 4, TP 2 x EP 2 (ranks sharing the GPU), and the forced EP 1 / TP 1 over NCCL (eager, full,
# scoped) = host-staged; (c) issue 24's spread: M bf16 on the same text with another init seed and
# other windows, 300 steps, to set beside call 3's bf16 and fp8 curves.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/s12d; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
for n in 2 3; do timeout 60 build/tests/gpu/coll_host_check $n > $OUT/coll_host_$n.txt 2>&1; echo "coll_host_check $n rc=$? $(tail -1 $OUT/coll_host_$n.txt)"; done
timeout 60 build/tests/gpu/coll_host_check nccl 1 > $OUT/coll_nccl_1.txt 2>&1; echo "coll_host_check nccl 1 rc=$? $(tail -1 $OUT/coll_nccl_1.txt)"
NF="model.check_for_nan_in_loss_and_grad=false"
B() { local d=$1 r=$2; shift 2; build/stepc build $r $NF "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
R=tests/recipes/tiny_mla_moe.lua
B one $R model.bf16=true
B ep2 $R model.bf16=true model.expert_model_parallel_size=2 train.world_size=2
B ep2cap $R model.bf16=true model.expert_model_parallel_size=2 train.world_size=2 model.moe_expert_capacity_factor=1.0
B onecap $R model.bf16=true model.moe_expert_capacity_factor=1.0
B ep4 $R model.bf16=true model.expert_model_parallel_size=4 train.world_size=4 train.global_batch_size=8
B one8 $R model.bf16=true train.global_batch_size=8
B tp2ep2 $R model.bf16=true model.tensor_model_parallel_size=2 model.sequence_parallel=true model.expert_tensor_parallel_size=1 model.expert_model_parallel_size=2 train.world_size=2
B mf $R model.bf16=true train.force_parallel_lowering=true model.sequence_parallel=true model.expert_tensor_parallel_size=1
B mseed models/bench_m.lua train.train_iters=300 optimizer.lr_warmup_iters=20 train.seed=4321
echo "built at $(( $(date +%s) - t0 )) s"
run1() { local d=$1 m=$2 o=$3; shift 3; env "$@" timeout 100 $T/$d/train --device cuda --graph-mode $m --steps 8 --json --save $T/ck_$o > $T/$o.json 2> $OUT/logs/$o.err; echo "$o rc=$? $(tail -1 $OUT/logs/$o.err)"; }
port=30750
runN() { local n=$1 d=$2 m=$3 o=$4; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 150 $T/$d/train --device cuda --graph-mode $m --steps 8 --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 one eager one_e X=1; run1 onecap eager onecap_e X=1; run1 one8 eager one8_e X=1
runN 2 ep2 eager ep2_e; runN 2 ep2 full_iteration ep2_g; runN 2 ep2cap eager ep2cap_e; runN 4 ep4 eager ep4_e; runN 2 tp2ep2 eager tp2ep2_e
for g in eager full_iteration scoped; do run1 mf $g mf_$g X=1; done
run1 mf eager mfh_eager STEPC_COLLECTIVES=host
for c in "one_e ep2_e 2" "one_e ep2_g 2" "onecap_e ep2cap_e 2" "one8_e ep4_e 4" "one_e tp2ep2_e 2"; do
  set -- $c; files=""; for r in $(seq 0 $(($3-1))); do files="$files $T/$2.r$r.json"; done
  echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $files $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done | tee $OUT/compare.txt
python3 - <<PY | tee -a $OUT/compare.txt
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
print('ep2 full vs eager', ['bitwise' if L('$T/ep2_e.r%d.json' % r) == L('$T/ep2_g.r%d.json' % r) else 'DIFFERENT' for r in range(2)])
e = L('$T/mf_eager.json')
for g in ('full_iteration', 'scoped'): print('forced NCCL', g, '== eager:', 'bitwise' if L('$T/mf_%s.json' % g) == e else 'DIFFERENT')
print('forced NCCL eager == host-staged:', 'bitwise' if L('$T/mfh_eager.json') == e else 'DIFFERENT')
PY
timeout 120 build/examples/train_text $T/mseed --device cuda --steps 300 --text gpuwork/text.txt --seed 7 > $OUT/text_mbf_seed.txt 2> $OUT/logs/text_seed.err; echo "text seed rc=$? $(tail -1 $OUT/logs/text_seed.err)"
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
