#!/usr/bin/env bash
# session 25: --gemm-tuning (first 8 timed) against the first-ranked, same build; the RMSNorm backward's
# addend prefetched (new build) against f723447 (gpuwork/base); torchao L8 in the same call
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
N=gpuwork/build; O=gpuwork/base; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
WHL=$(ls gpuwork/torchao-*.whl)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> $S
t0=${T0:-$(date +%s)}; el() { echo $(( $(date +%s)-t0 )); }
T=/usr/share/common-licenses/GPL-3; [ -r $T ] || T=docs/gpu-runtime.md
timeout 120 tests/gpu/gemm_tuning.sh $N/stepc $T > $L/gemm_tuning.log 2>&1; echo "gemm_tuning rc=$? $(el)s" >> $S
cat $L/gemm_tuning.log >> $S
timeout 50 $N/tests/gpu/gpu_kernels --no-bench --only basic > $L/kern.log 2>&1; echo "kernels rc=$? $(el)s" >> $S
grep -E "^FAIL|checks|addend" $L/kern.log | head -12 >> $S
F8="model.fp8=hybrid model.fp8_recipe=tensorwise model.fp8_param=true"
bench() { # NAME BUILD TUNE SHAPES EXTRA
  OUT=$L/bench_$1 BUILD=$2 TUNE=$3 SHAPES="$4" STEPS=12 EXTRA="$5" timeout 150 bench/run_bench.sh > $L/bench_$1.out 2>&1
  echo "bench $1 rc=$? $(el)s" >> $S; grep stepc $L/bench_$1/summary.txt >> $S
}
bench new_t0 $N "" "L8" "L8_f8p:L8:$F8"
bench new_t8 $N 8 "L8" "L8_f8p:L8:$F8"
bench base_t0 $O "" " " "L8_f8p:L8:$F8"
if [ $(el) -lt 450 ]; then
  PYTHONUNBUFFERED=1 timeout 85 python3 gpuwork/torch_fp8.py --torchao-wheel $WHL --model L8 --steps 10 --variants compile_fp8_tensorwise:none --out $L/fp8.jsonl > $L/torch_fp8_L8.log 2>&1
  echo "torch_fp8 L8 rc=$? $(el)s" >> $S; cat $L/fp8.jsonl >> $S
fi
for b in new base; do B=$N; [ $b = base ] && B=$O
  [ $(el) -lt 480 ] || break
  timeout 40 $B/stepc run models/llama3_8b.lua model.num_layers=8 $F8 --device cuda --steps 3 --profile --timeline $L/prof_$b.json > $L/prof_$b.txt 2>&1; echo "prof $b rc=$? $(el)s" >> $S
  grep -E "^norm|^total" $L/prof_$b.txt >> $S
  python3 - $L/prof_$b.json >> $S <<'PY'
import json, sys, re, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
a = collections.defaultdict(float)
for e in ev:
    if e.get("ph") == "X" and e.get("cat") == "backward" and re.match(r"add layers\.\d+\.(input|pre_mlp)_layernorm", e["name"]):
        a[e["name"].split()[0]] += e["dur"]
print("norm bwd+add (16 ops) ms:", {k: round(v / 1000, 3) for k, v in a.items()})
PY
done
[ $(el) -lt 500 ] && bench new_M_t0 $N "" "M" "" && bench new_M_t8 $N 8 "M" ""
cd /tmp && tar czf $OUT/logs.tgz logs
