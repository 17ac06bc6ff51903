#!/usr/bin/env bash
# GPU call 1 (session 12): (a) NCCL at world size 1 through the TP / SP / EP code
# (train.force_parallel_lowering): tiny (TP + SP) and tiny_mla_moe (TP + SP x EP, ETP 1) forced, eager /
# full-iteration / scoped over NCCL, eager host-staged, against the plain one-rank step;
# (b) Mamba-2 under TP on the H200: tiny_hybrid at TP 2 + SP, two ranks sharing the GPU, eager and
# full-iteration, against one rank; (c) models/llama3_70b_fp8.lua at 6 layers, TP 1, fp8, its recipe's
# recompute and TE mlp graphs: measured peak against the plan.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/s12a; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
NF="model.check_for_nan_in_loss_and_grad=false"
B() { local d=$1 r=$2; shift 2; build/stepc build $r $NF "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
F="train.force_parallel_lowering=true model.sequence_parallel=true"
B one models/tiny.lua model.bf16=true
B f models/tiny.lua model.bf16=true $F
B mone tests/recipes/tiny_mla_moe.lua model.bf16=true
B mf tests/recipes/tiny_mla_moe.lua model.bf16=true $F model.expert_tensor_parallel_size=1
B hone tests/recipes/tiny_hybrid.lua model.bf16=true
B htp2 tests/recipes/tiny_hybrid.lua model.bf16=true model.expert_tensor_parallel_size=1 model.tensor_model_parallel_size=2 model.sequence_parallel=true train.world_size=2
L70="model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1 model.virtual_pipeline_model_parallel_size=null model.sequence_parallel=false train.world_size=1 optimizer.use_distributed_optimizer=false model.fp8_param=false ddp.grad_reduce_in_fp32=true train.global_batch_size=1 model.num_layers=6"
B l70 models/llama3_70b_fp8.lua $L70
echo "built at $(( $(date +%s) - t0 )) s"
run1() { local d=$1 m=$2 s=$3 o=$4; shift 4; env "$@" timeout 200 $T/$d/train --device cuda --graph-mode $m --steps $s --json --save $T/ck_$o > $T/$o.json 2> $OUT/logs/$o.err; echo "$o rc=$? at $(( $(date +%s) - t0 )) s $(tail -1 $OUT/logs/$o.err)"; }
port=30450
runN() { local n=$1 d=$2 m=$3 s=$4 o=$5; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 300 $T/$d/train --device cuda --graph-mode $m --steps $s --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
for g in eager full_iteration scoped; do run1 one $g 8 one_$g X=1; run1 f $g 8 f_$g X=1; run1 mone $g 8 mone_$g X=1; run1 mf $g 8 mf_$g X=1; done
run1 f eager 8 fh_eager STEPC_COLLECTIVES=host; run1 mf eager 8 mfh_eager STEPC_COLLECTIVES=host
run1 f full_iteration 8 fh_full_iteration STEPC_COLLECTIVES=host
grep -h "comm\|nccl\|NCCL" $OUT/logs/f_eager.err | head -3
run1 hone eager 8 hone_e X=1
runN 2 htp2 eager 8 htp2_e; runN 2 htp2 full_iteration 8 htp2_g
run1 l70 scoped 3 l70_te X=1 || true
python3 - <<PY | tee $OUT/summary.txt
import json, os
def J(n):
    try: return json.load(open('$T/%s.json' % n))
    except Exception as e: print('missing', n, e); return {'steps': [], 'measure': {'max_allocated_bytes': 0, 'predicted_peak_bytes': 1}}
def L(n): return [(s['loss'], s['grad_norm']) for s in J(n)['steps']] or [(float('nan'), 0)]
def rel(a, b): return max(abs(x[0] - y[0]) / abs(y[0]) for x, y in zip(a, b))
for base, f in (('one', 'f'), ('mone', 'mf')):
    e = L(f + '_eager')
    for g in ('full_iteration', 'scoped'):
        print('%s NCCL %s == eager: %s' % (f, g, 'bitwise' if L('%s_%s' % (f, g)) == e else 'DIFFERENT'))
    print('%s NCCL eager == host-staged eager: %s' % (f, 'bitwise' if L(f + 'h_eager') == e else 'DIFFERENT'))
    print('%s vs the plain step (%s): loss max rel %.2e; first %s vs %s' % (f, base, rel(e, L(base + '_eager')), e[0], L(base + '_eager')[0]))
    print('  plain %s full == eager: %s' % (base, 'bitwise' if L(base + '_full_iteration') == L(base + '_eager') else 'DIFFERENT'))
    m = J(f + '_eager')['measure']; print('  %s peak %d predicted %d (%+.4f%%)' % (f, m['max_allocated_bytes'], m['predicted_peak_bytes'], 100.0*(m['max_allocated_bytes']-m['predicted_peak_bytes'])/m['predicted_peak_bytes']))
print('f host full == host eager:', 'bitwise' if L('fh_full_iteration') == L('fh_eager') else 'DIFFERENT')
for r in (0, 1):
    a = json.load(open('$T/htp2_e.r%d.json' % r)); b = json.load(open('$T/htp2_g.r%d.json' % r))
    la = [(s['loss'], s['grad_norm']) for s in a['steps']]; lb = [(s['loss'], s['grad_norm']) for s in b['steps']]
    print('hybrid TP2 rank', r, 'full == eager:', 'bitwise' if la == lb else 'DIFFERENT', '; vs one rank loss max rel %.2e' % rel(la, L('hone_e')))
    m = a['measure']; print('  peak %d predicted %d (%+.4f%%)' % (m['max_allocated_bytes'], m['predicted_peak_bytes'], 100.0*(m['max_allocated_bytes']-m['predicted_peak_bytes'])/m['predicted_peak_bytes']))
if os.path.exists('$T/l70_te.json'):
    d = J('l70_te'); m = d['measure']
    print('llama3_70b_fp8 6 layers: losses', [round(s['loss'], 4) for s in d['steps']], 'ms', [round(s['ms']) for s in d['steps']])
    print('  peak %d predicted %d (%+.4f%%)' % (m['max_allocated_bytes'], m['predicted_peak_bytes'], 100.0*(m['max_allocated_bytes']-m['predicted_peak_bytes'])/m['predicted_peak_bytes']))
PY
for c in "hone_e htp2_e 2"; do set -- $c; echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $T/$2.r0.json $T/$2.r1.json $T/ck_$2 2>&1 | grep -vE "^step [2-7] "; done | tee $OUT/compare.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
