#!/usr/bin/env bash
# session 25: the gemm_tuning GPU test with the open's notice (build with the notice), and the notice at L8 fp8
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
N=gpuwork/build; L=/tmp/logs; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
T=/usr/share/common-licenses/GPL-3; [ -r $T ] || T=docs/gpu-runtime.md
timeout 100 tests/gpu/gemm_tuning.sh $N/stepc $T > $L/gemm_tuning.log 2>&1; echo "gemm_tuning rc=$? $(el)s" >> $S
cat $L/gemm_tuning.log >> $S
F8="model.fp8=hybrid model.fp8_recipe=tensorwise model.fp8_param=true"
timeout 60 $N/stepc run models/llama3_8b.lua model.num_layers=8 $F8 --device cuda --steps 4 --gemm-tuning 8 > $L/l8.txt 2>&1
echo "l8 tuned rc=$? $(el)s" >> $S; grep -E "GEMM shapes|step +4" $L/l8.txt >> $S
cd /tmp && tar czf $OUT/logs.tgz logs
