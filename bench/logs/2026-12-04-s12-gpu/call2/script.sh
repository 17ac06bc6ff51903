#!/usr/bin/env bash
# GPU call 2 (session 12): (a) of call 1 again after the fix (a rank alone: no bucket hooks) —: (a) NCCL at world size 1 through the TP / SP / EP code
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
T=/tmp/s12b; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
NF="model.check_for_nan_in_loss_and_grad=false"
B() { local d=$1 r=$2; shift 2; build/stepc build $r $NF "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
F="train.force_parallel_lowering=true model.sequence_parallel=true"
B one models/tiny.lua model.bf16=true
B f models/tiny.lua model.bf16=true $F
B mone tests/recipes/tiny_mla_moe.lua model.bf16=true
B mf tests/recipes/tiny_mla_moe.lua model.bf16=true $F model.expert_tensor_parallel_size=1
echo "built at $(( $(date +%s) - t0 )) s"
run1() { local d=$1 m=$2 s=$3 o=$4; shift 4; env "$@" timeout 200 $T/$d/train --device cuda --graph-mode $m --steps $s --json $([ "${SAVE:-1}" = 1 ] && echo --save $T/ck_$o) > $T/$o.json 2> $OUT/logs/$o.err; echo "$o rc=$? at $(( $(date +%s) - t0 )) s $(tail -1 $OUT/logs/$o.err)"; }
port=30550
runN() { local n=$1 d=$2 m=$3 s=$4 o=$5; port=$((port+1)); for r in $(seq 0 $((n-1))); do RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 400 $T/$d/train --device cuda --graph-mode $m --steps $s --json > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
for g in eager full_iteration scoped; do run1 one $g 8 one_$g X=1; run1 f $g 8 f_$g X=1; run1 mone $g 8 mone_$g X=1; run1 mf $g 8 mf_$g X=1; done
run1 f eager 8 fh_eager STEPC_COLLECTIVES=host; run1 mf eager 8 mfh_eager STEPC_COLLECTIVES=host
run1 f full_iteration 8 fh_full_iteration STEPC_COLLECTIVES=host
grep -h "comm" $OUT/logs/f_eager.err | head -3
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
PY
# (b) moonlight_mla_7l at TP 2 x EP 4 (four ranks sharing the GPU, host-staged): full-iteration vs eager
B m7 models/moonlight_mla_7l.lua model.tensor_model_parallel_size=2 model.sequence_parallel=true model.expert_tensor_parallel_size=1 model.expert_model_parallel_size=4 train.world_size=4 train.global_batch_size=2
runN 4 m7 eager 3 m7_e; runN 4 m7 full_iteration 3 m7_g
python3 - <<PY | tee -a $OUT/summary.txt
import json
for r in range(4):
    a = json.load(open('$T/m7_e.r%d.json' % r)); b = json.load(open('$T/m7_g.r%d.json' % r))
    la = [(s['loss'], s['grad_norm']) for s in a['steps']]; lb = [(s['loss'], s['grad_norm']) for s in b['steps']]
    ma, mb = a['measure'], b['measure']
    print('m7 TP2xEP4 rank', r, 'full == eager:', 'bitwise' if la == lb else 'DIFFERENT', la[0], lb[0], 'graph', [s['graph'] for s in b['steps']],
          'peak e %d g %d predicted %d (%+.4f%%)' % (ma['max_allocated_bytes'], mb['max_allocated_bytes'], ma['predicted_peak_bytes'], 100.0*(mb['max_allocated_bytes']-mb['predicted_peak_bytes'])/mb['predicted_peak_bytes']),
          'ms', [round(s['ms']) for s in b['steps']])
PY
# (c) issue 24: M in fp8 (current scaling) and in bf16, 300 steps each on real text (licences and git's
# release notes, 1.7 MB, byte-level), the same batches (train_text's windows from the seed)
TXT="train.train_iters=300 optimizer.lr_warmup_iters=20"
B mbf models/bench_m.lua $TXT
B mf8 models/bench_m.lua $TXT model.fp8=hybrid model.fp8_recipe=tensorwise
for d in mbf mf8; do timeout 200 build/examples/train_text $T/$d --device cuda --steps 300 --text gpuwork/text.txt > $OUT/text_$d.txt 2> $OUT/logs/text_$d.err; echo "text $d rc=$? at $(( $(date +%s) - t0 )) s $(tail -1 $OUT/logs/text_$d.err)"; done
python3 - <<PY | tee -a $OUT/summary.txt
def L(p): return {int(l.split()[1]): float(l.split()[3]) for l in open(p) if l.startswith('step ')}
a, b = L('$OUT/text_mbf.txt'), L('$OUT/text_mf8.txt')
worst = 0
for s in [1] + list(range(50, 301, 50)):
    if s in a and s in b:
        r = (b[s] - a[s]) / a[s]; worst = max(worst, abs(r) if s > 1 else worst)
        print('step %3d bf16 %.4f fp8 %.4f rel %+.3f%%' % (s, a[s], b[s], 100 * r))
print('largest |rel| at steps 50..300: %.3f%%' % (100 * worst))
PY
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
