#!/usr/bin/env bash
# GPU call 1 (session 13): tensor parallelism's backward collectives on the communication stream
# (compiler/passes/comm_overlap.c). (a) tiny TP 2 + SP, TP 2 (no SP), tiny_mla_moe TP 2 + SP x EP 2,
# ranks sharing the GPU (host-staged): eager, full-iteration, and eager with STEPC_COMM_OVERLAP=0
# (serial) — overlap = serial bitwise, full = eager bitwise, against one rank, peak vs plan;
# (b) the forced TP 1 + SP over NCCL at world 1: eager / full / scoped / serial bitwise, --profile
# --timeline (the tp comm stream track); (c) timing A/B: M (bench_m, 4 layers) TP 2 + SP on two ranks
# sharing the GPU (host-staged), and M forced TP 1 + SP over NCCL (16 layers), overlap vs serial.
# First the kernel checks of the fp8 amax fused into its producers (h-amax, 136761c): gpu_kernels fp8, basic.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/s13a; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
for k in fp8 basic; do timeout 150 build/tests/gpu/gpu_kernels --only $k > $OUT/kernels_$k.txt 2>&1; echo "gpu_kernels $k rc=$? $(grep -cE '^FAIL' $OUT/kernels_$k.txt) FAIL lines; $(tail -1 $OUT/kernels_$k.txt)"; done
NF="model.check_for_nan_in_loss_and_grad=false"
B() { local d=$1 r=$2; shift 2; build/stepc build $r $NF "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
M=tests/recipes/tiny_mla_moe.lua
B one models/tiny.lua
B tp2sp models/tiny.lua model.tensor_model_parallel_size=2 model.sequence_parallel=true train.world_size=2
B tp2 models/tiny.lua model.tensor_model_parallel_size=2 model.sequence_parallel=false train.world_size=2
B mone $M model.bf16=true
B mtp $M model.bf16=true model.tensor_model_parallel_size=2 model.sequence_parallel=true model.expert_tensor_parallel_size=1 model.expert_model_parallel_size=2 train.world_size=2
B forced models/tiny.lua train.force_parallel_lowering=true model.sequence_parallel=true
B tp2te models/tiny.lua model.tensor_model_parallel_size=2 model.sequence_parallel=true train.world_size=2 model.cuda_graph_impl=transformer_engine model.cuda_graph_modules=[attn,mlp]
B mtp4 models/bench_m.lua model.num_layers=4 model.tensor_model_parallel_size=2 model.sequence_parallel=true train.world_size=2
B mforced models/bench_m.lua train.force_parallel_lowering=true model.sequence_parallel=true
for d in tp2sp tp2 mtp forced mtp4 mforced; do echo "$d: $(grep -c FORK $T/$d/program.txt) windows"; done
echo "built at $(( $(date +%s) - t0 )) s"
run1() { local d=$1 m=$2 o=$3; shift 3; env "$@" timeout 100 $T/$d/train --device cuda --graph-mode $m --steps 8 --json --save $T/ck_$o > $T/$o.json 2> $OUT/logs/$o.err; echo "$o rc=$? $(tail -1 $OUT/logs/$o.err)"; }
port=31750
runN() { local n=$1 d=$2 m=$3 o=$4; shift 4; port=$((port+1)); for r in $(seq 0 $((n-1))); do env "$@" RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 150 $T/$d/train --device cuda --graph-mode $m --steps 8 --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 one eager one_e X=1; run1 mone eager mone_e X=1
for d in tp2sp tp2 mtp; do
  runN 2 $d eager ${d}_e X=1; runN 2 $d full_iteration ${d}_g X=1; runN 2 $d eager ${d}_s STEPC_COMM_OVERLAP=0
done
runN 2 tp2te eager tp2te_e X=1; runN 2 tp2te scoped tp2te_sc X=1
for g in eager full_iteration scoped; do run1 forced $g f_$g X=1; done
run1 forced eager f_serial STEPC_COMM_OVERLAP=0
run1 forced eager f_host STEPC_COLLECTIVES=host
for c in "one_e tp2sp_e 2" "one_e tp2_e 2" "mone_e mtp_e 2"; do
  set -- $c; files=""; for r in $(seq 0 $(($3-1))); do files="$files $T/$2.r$r.json"; done
  echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $files $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done | tee $OUT/compare.txt
python3 - <<PY | tee -a $OUT/compare.txt
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
def P(p): d = json.load(open(p))['measure']; return d['max_allocated_bytes'], d['predicted_peak_bytes'], '%+.4f%%' % (100.0 * (d['max_allocated_bytes'] / d['predicted_peak_bytes'] - 1))
for d in ('tp2sp', 'tp2', 'mtp'):
  for r in range(2):
    e = L('$T/%s_e.r%d.json' % (d, r))
    print(d, 'rank', r, 'full == eager:', L('$T/%s_g.r%d.json' % (d, r)) == e, ' serial == overlap:', L('$T/%s_s.r%d.json' % (d, r)) == e, ' peak/plan:', P('$T/%s_e.r%d.json' % (d, r)))
for r in range(2): print('tp2te rank', r, 'scoped == eager:', L('$T/tp2te_sc.r%d.json' % r) == L('$T/tp2te_e.r%d.json' % r), P('$T/tp2te_sc.r%d.json' % r))
e = L('$T/f_eager.json')
for g in ('full_iteration', 'scoped', 'serial', 'host'): print('forced NCCL', g, '== eager:', L('$T/f_%s.json' % g) == e)
print('forced peak/plan:', P('$T/f_eager.json'))
PY
# the timeline (forced, NCCL) and the A/B timings
timeout 120 build/stepc run $T/forced --device cuda --steps 3 --profile --timeline $OUT/forced_timeline.json > $OUT/forced_profile.txt 2>&1; echo "forced profile rc=$?"; grep -i "comm stream" $OUT/forced_profile.txt
for i in 1 2; do
  for v in 1 0; do
    timeout 120 env STEPC_COMM_OVERLAP=$v $T/mforced/train --device cuda --graph-mode full_iteration --steps 12 --json > $T/mf_$v.json 2> $OUT/logs/mf_$v.err
    python3 -c "import json,statistics as s; d=json.load(open('$T/mf_$v.json')); t=[x['ms'] for x in d['steps']][4:]; print('M forced NCCL overlap=$v round $i: median %.3f ms' % s.median(t))"
  done
done | tee $OUT/ab_forced.txt
timeout 200 build/stepc run $T/mforced --device cuda --steps 3 --profile --timeline $OUT/mforced_timeline.json > $OUT/mforced_profile.txt 2>&1; echo "mforced profile rc=$?"; grep -i "comm stream" $OUT/mforced_profile.txt
for v in 1 0; do
  port=$((port+1)); for r in 0 1; do env STEPC_COMM_OVERLAP=$v RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
    timeout 200 $T/mtp4/train --device cuda --graph-mode eager --steps 5 --json > $T/mtp4_$v.r$r.json 2> $OUT/logs/mtp4_$v.r$r.err & done; wait
  python3 -c "import json,statistics as s; d=json.load(open('$T/mtp4_$v.r0.json')); t=[x['ms'] for x in d['steps']][2:]; print('M 4 layers TP 2 + SP host-staged overlap=$v: median %.1f ms, losses %s' % (s.median(t), [x['loss'] for x in d['steps']]))"
done | tee $OUT/ab_mtp4.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
