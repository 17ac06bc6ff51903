#!/usr/bin/env bash
# session 26 call 2 (H100): fused flash backward variant vs production and cuDNN; 65b2e90's notice test; M tuned beside compile
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
N=gpuwork/build; L=/tmp/logs; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
STEPC_FLASH_VARIANTS=1 timeout 200 $N/tests/gpu/gpu_kernels --bench-only > $L/var.txt 2>&1; echo "variants rc=$? $(el)s" >> $S
grep -E "^BENCH|VAR .*(wg_|attention_backward)|FAIL" $L/var.txt | grep -v mamba >> $S
timeout 90 $N/tests/gpu/gpu_cudnn_attn --bench > $L/cudnn.txt 2>&1; echo "cudnn rc=$? $(el)s" >> $S; grep -E "BENCH|FAIL" $L/cudnn.txt >> $S
T=/usr/share/common-licenses/GPL-3; [ -r $T ] || T=docs/gpu-runtime.md
timeout 100 tests/gpu/gemm_tuning.sh $N/stepc $T > $L/gemm_tuning.log 2>&1; echo "gemm_tuning rc=$? $(el)s" >> $S
tail -4 $L/gemm_tuning.log >> $S
F8="model.fp8=hybrid model.fp8_recipe=tensorwise model.fp8_param=true"
timeout 60 $N/stepc run models/llama3_8b.lua model.num_layers=8 $F8 --device cuda --steps 4 --gemm-tuning 8 > $L/l8.txt 2>&1
echo "l8 tuned rc=$? $(el)s" >> $S; grep -E "GEMM shapes|step +4" $L/l8.txt >> $S
OUT=$L/benchM BUILD=$N SHAPES=M TUNE=8 TORCH_STEP=gpuwork/torch_step.py STEPS=15 timeout 240 bench/run_bench.sh > $L/benchM.log 2>&1
echo "benchM rc=$? $(el)s" >> $S; cat $L/benchM/summary.txt >> $S 2>/dev/null
cd /tmp && tar czf $OUT/logs.tgz logs
