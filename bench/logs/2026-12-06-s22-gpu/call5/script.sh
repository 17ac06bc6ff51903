#!/usr/bin/env bash
# session 22, H200: stepc fp8 (L8 fp8 primary weights, M) beside torch_fp8.py's torchao tensorwise compiled step (issue 24)
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
WHL=$(ls gpuwork/torchao-*.whl)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
left() { echo $(( 520 - ($(date +%s) - t0) )); }
F8="model.fp8=hybrid model.fp8_recipe=tensorwise"
OUT=$L/bench BUILD=$B SHAPES=" " STEPS=15 EXTRA="L8_f8p:L8:$F8 model.fp8_param=true;M_f8:M:$F8" timeout 200 bench/run_bench.sh > $L/bench_out.txt 2>&1
echo "stepc done $(( $(date +%s)-t0 ))s" >> $S
cat $L/bench/summary.txt >> $S
for m in L8 M; do
  PYTHONUNBUFFERED=1 timeout $(( $(left) )) python3 gpuwork/torch_fp8.py --torchao-wheel $WHL --model $m --steps 10 --variants compile_fp8_tensorwise:none --out $L/fp8.jsonl > $L/torch_fp8_$m.log 2>&1
  echo "torch_fp8 $m rc=$? $(( $(date +%s)-t0 ))s" >> $S
done
cat $L/fp8.jsonl >> $S
cd /tmp && tar czf $OUT/logs.tgz logs
