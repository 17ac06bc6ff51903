#!/usr/bin/env bash
# session 24 call 2, H100: the fp8 linear + residual add as one GEMM, the norm backward's addend staged by
# cp.async, rope_concat_qkv at one wave (working tree on e73448a = gpuwork/build) against e73448a (gpuwork/base)
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
N=gpuwork/build; O=gpuwork/base; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
WHL=$(ls gpuwork/torchao-*.whl)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
timeout 120 $N/tests/gpu/gpu_kernels --no-bench --only basic > $L/kern.log 2>&1; echo "kernels rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "^FAIL|checks|addend" $L/kern.log | head -20 >> $S
F8="model.fp8=hybrid model.fp8_recipe=tensorwise"
for r in 1 2; do for b in new base; do B=$N; [ $b = base ] && B=$O
  SH="L8"; EX="L8_f8p:L8:$F8 model.fp8_param=true;M_f8:M:$F8"; [ $r = 2 ] && SH=" " && EX="L8_f8p:L8:$F8 model.fp8_param=true"
  OUT=$L/bench_${b}_$r BUILD=$B SHAPES="$SH" STEPS=12 EXTRA="$EX" timeout 120 bench/run_bench.sh > $L/bench_${b}_$r.out 2>&1
  echo "bench $b round $r rc=$? $(( $(date +%s)-t0 ))s" >> $S; grep stepc $L/bench_${b}_$r/summary.txt >> $S
done; done
PYTHONUNBUFFERED=1 timeout 100 python3 gpuwork/torch_fp8.py --torchao-wheel $WHL --model L8 --steps 10 --variants compile_fp8_tensorwise:none --out $L/fp8.jsonl > $L/torch_fp8_L8.log 2>&1
echo "torch_fp8 L8 rc=$? $(( $(date +%s)-t0 ))s" >> $S; cat $L/fp8.jsonl >> $S
timeout 60 $N/stepc run models/llama3_8b.lua model.num_layers=8 $F8 model.fp8_param=true --device cuda --steps 3 --profile --timeline $L/l8f8_tl.json > $L/l8f8_prof.txt 2>&1; echo "l8f8 prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
sed -n "/^class/,/^total/p" $L/l8f8_prof.txt >> $S
BUILD=$N OUT=$L/step ONLY="^(grads_tiny|grads_gpt|replay_flash|recompute_tiny|scoped_recompute|fp8_grads_tensorwise|fp8_grads_delayed|fp8_replay_tensorwise|fp8_replay_delayed|fp8_recompute_tensorwise|fp8_recompute_delayed|fp8_scoped_delayed|fp8_cli_delayed_graph|fp8_moe_grads_tensorwise)$" RUN_TIMEOUT=60 timeout $(( 570 - ($(date +%s)-t0) )) tests/gpu/run_step_tests.sh > $L/step_out.txt 2>&1
echo "step rc=$? $(( $(date +%s)-t0 ))s" >> $S; grep -E "^--|FAIL" $L/step/summary.log | cut -c1-160 >> $S
cd /tmp && tar czf $OUT/logs.tgz logs
