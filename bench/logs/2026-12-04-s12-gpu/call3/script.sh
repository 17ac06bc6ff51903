#!/usr/bin/env bash
# GPU call 3 (session 12): (a) replicated KV under TP on the H200 (ranks sharing the GPU, host-staged):
# tiny with 1 KV group at TP 2 and TP 2 + SP, and tiny (2 groups) at TP 2 + SP (init_normal_tp's new
# arguments), each against one rank; (b) issue 24: M in fp8 (current scaling) and bf16, 300 steps each
# on real text (licences and git's release notes, 1.7 MB, byte-level), the same batches.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
T=/tmp/s12c; rm -rf $T; mkdir -p $T $OUT/logs
t0=$(date +%s)
NF="model.check_for_nan_in_loss_and_grad=false"
B() { local d=$1 r=$2; shift 2; build/stepc build $r $NF "$@" -o $T/$d > $OUT/logs/build_$d.txt 2>&1 || { echo "build $d failed"; tail -3 $OUT/logs/build_$d.txt; }; }
TP="model.tensor_model_parallel_size=2 train.world_size=2"
B g1one models/tiny.lua model.bf16=true model.num_query_groups=1
B g1tp2 models/tiny.lua model.bf16=true model.num_query_groups=1 $TP
B g1sp2 models/tiny.lua model.bf16=true model.num_query_groups=1 $TP model.sequence_parallel=true
B one models/tiny.lua model.bf16=true
B sp2 models/tiny.lua model.bf16=true $TP model.sequence_parallel=true
TXT="train.train_iters=300 optimizer.lr_warmup_iters=20"
B mbf models/bench_m.lua $TXT
B mf8 models/bench_m.lua $TXT model.fp8=hybrid model.fp8_recipe=tensorwise
echo "built at $(( $(date +%s) - t0 )) s"
run1() { timeout 100 $T/$1/train --device cuda --graph-mode $2 --steps 8 --json --save $T/ck_$3 > $T/$3.json 2> $OUT/logs/$3.err; echo "$3 rc=$? $(tail -1 $OUT/logs/$3.err)"; }
port=30650
runN() { local d=$1 m=$2 o=$3; port=$((port+1)); for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port STEPC_JOB_SECRET=tp-s3cret-0123456789abcdef \
  timeout 100 $T/$d/train --device cuda --graph-mode $m --steps 8 --json --save $T/ck_$o > $T/$o.r$r.json 2> $OUT/logs/$o.r$r.err & done; wait; echo "$o done at $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/$o.r0.err)"; }
run1 g1one eager g1one_e; run1 one eager one_e
runN g1tp2 eager g1tp2_e; runN g1tp2 full_iteration g1tp2_g; runN g1sp2 eager g1sp2_e; runN sp2 eager sp2_e
for c in "g1one_e g1tp2_e" "g1one_e g1tp2_g" "g1one_e g1sp2_e" "one_e sp2_e"; do
  set -- $c; echo "== $2 vs $1"; python3 gpuwork/cmp_tp.py $T/$1.json $T/ck_$1 $T/$2.r0.json $T/$2.r1.json $T/ck_$2 2>&1 | grep -vE "^step [2-7] "
done | tee $OUT/compare.txt
python3 - <<PY | tee -a $OUT/compare.txt
import json
def L(p): return [(s['loss'], s['grad_norm']) for s in json.load(open(p))['steps']]
print('g1tp2 full vs eager', ['bitwise' if L('$T/g1tp2_e.r%d.json' % r) == L('$T/g1tp2_g.r%d.json' % r) else 'DIFFERENT' for r in range(2)])
PY
for d in mbf mf8; do timeout 200 build/examples/train_text $T/$d --device cuda --steps 300 --text gpuwork/text.txt > $OUT/text_$d.txt 2> $OUT/logs/text_$d.err; echo "text $d rc=$? at $(( $(date +%s) - t0 )) s $(tail -1 $OUT/logs/text_$d.err)"; done
python3 - <<PY | tee $OUT/summary.txt
def L(p): return {int(l.split()[1]): float(l.split()[3]) for l in open(p) if l.startswith('step ')}
a, b = L('$OUT/text_mbf.txt'), L('$OUT/text_mf8.txt')
worst = 0
for s in [1] + list(range(50, 301, 50)):
    if s in a and s in b:
        r = (b[s] - a[s]) / a[s]
        if s >= 50: worst = max(worst, abs(r))
        print('step %3d bf16 %.4f fp8 %.4f rel %+.3f%%' % (s, a[s], b[s], 100 * r))
print('largest |rel| at steps 50..300: %.3f%%' % (100 * worst))
PY
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
echo "done at $(( $(date +%s) - t0 )) s"
