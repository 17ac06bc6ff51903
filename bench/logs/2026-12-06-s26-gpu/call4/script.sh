#!/usr/bin/env bash
# session 26 call 4 (H100): deterministic_mode under auto at head dim 64 on stepc's own backward: step tests; M, M_det (new), M_det on cuDNN (fused)
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
N=gpuwork/build; L=/tmp/logs; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
OUT=$L/steps BUILD=$N ONLY="auto_det|replay_fused" timeout 200 tests/gpu/run_step_tests.sh > $L/steps.log 2>&1; echo "steps rc=$? $(el)s" >> $S
tail -8 $L/steps.log >> $S
OUT=$L/benchM BUILD=$N SHAPES=M EXTRA="M_det:M:model.deterministic_mode=true;M_det_cudnn:M:model.deterministic_mode=true model.attention_backend=fused" STEPS=15 timeout 230 bench/run_bench.sh > $L/benchM.log 2>&1
echo "benchM rc=$? $(el)s" >> $S; cat $L/benchM/summary.txt >> $S 2>/dev/null
cd /tmp && tar czf $OUT/logs.tgz logs
