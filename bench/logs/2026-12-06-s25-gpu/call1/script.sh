#!/usr/bin/env bash
# session 24 call 3, H100: the output layer's first chunk stores dW (no memset); AdamW per tensor four-wide (float4);
# the norms' row sums behind a named barrier of the row's warps; rope_concat_qkv at one wave
# (main 919e870 build = gpuwork/build) against e73448a (gpuwork/base), in the same call
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
N=gpuwork/build; O=gpuwork/base; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
WHL=$(ls gpuwork/torchao-*.whl)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
timeout 50 $N/tests/gpu/gpu_kernels --no-bench --only basic > $L/kern.log 2>&1; echo "kernels rc=$? $(el)s" >> $S
grep -E "^FAIL|checks|adamw|C=4096|C=6152" $L/kern.log | head -24 >> $S
BUILD=$N OUT=$L/step ONLY="^(chunks_grads_one_micro|fp8_grads_tensorwise)$" RUN_TIMEOUT=45 timeout 95 tests/gpu/run_step_tests.sh > $L/step_out.txt 2>&1
echo "step rc=$? $(el)s" >> $S; grep -E "^--|FAIL|PASS" $L/step/summary.log | cut -c1-160 >> $S
F8="model.fp8=hybrid model.fp8_recipe=tensorwise"
for b in new base; do B=$N; [ $b = base ] && B=$O
  OUT=$L/bench_$b BUILD=$B SHAPES="L8" STEPS=12 EXTRA="L8_f8p:L8:$F8 model.fp8_param=true" timeout 70 bench/run_bench.sh > $L/bench_$b.out 2>&1
  echo "bench $b rc=$? $(el)s" >> $S; grep stepc $L/bench_$b/summary.txt >> $S
done
if [ $(el) -lt 170 ]; then
  PYTHONUNBUFFERED=1 timeout 85 python3 gpuwork/torch_fp8.py --torchao-wheel $WHL --model L8 --steps 10 --variants compile_fp8_tensorwise:none --out $L/fp8.jsonl > $L/torch_fp8_L8.log 2>&1
  echo "torch_fp8 L8 rc=$? $(el)s" >> $S; cat $L/fp8.jsonl >> $S
fi
if [ $(el) -lt 240 ]; then
  timeout 30 $N/stepc run models/llama3_8b.lua model.num_layers=8 $F8 model.fp8_param=true --device cuda --steps 3 --profile --timeline $L/l8f8_tl.json > $L/l8f8_prof.txt 2>&1; echo "l8f8 prof rc=$? $(el)s" >> $S
  sed -n "/^class/,/^total/p" $L/l8f8_prof.txt >> $S
fi
cd /tmp && tar czf $OUT/logs.tgz logs
