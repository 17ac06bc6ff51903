#!/usr/bin/env bash
# session 23, H100 (main 67097a5): the new routing kernels' checks; a 6-layer Nemotron profiled with its timeline (before: call 2); MoE/MLA/Mamba step tests; MoE7 beside torch_moe.py while time lasts
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - t0) )); }
timeout 120 $B/tests/gpu/gpu_kernels --only basic > $L/basic.log 2>&1; echo "basic rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "router|dispatch|head_|FAIL|checks|FATAL" $L/basic.log >> $S
NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM* model.num_layers=6 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 150 $B/stepc run $NEMO --device cuda --steps 3 --profile --timeline $L/nemo6_timeline.json > $L/nemo6_prof.txt 2>&1; echo "prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
sed -n '/^class/,/^total/p' $L/nemo6_prof.txt >> $S; grep -E "^step|max allocated" $L/nemo6_prof.txt >> $S
BUILD=$B OUT=$L/step ONLY="moe|mla|mamba|hybrid" RUN_TIMEOUT=120 timeout $(( $(left) - 150 )) tests/gpu/run_step_tests.sh > $L/step_summary.txt 2>&1; echo "step rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "^--|FAIL" $L/step_summary.txt | cut -c1-160 >> $S
if [ $(left) -gt 140 ]; then
  OUT=$L/bench BUILD=$B SHAPES="MoE7" STEPS=15 TORCH_MOE=gpuwork/torch_moe.py timeout $(( $(left) )) bench/run_bench.sh > $L/bench_out.txt 2>&1
  echo "moe7 rc=$? $(( $(date +%s)-t0 ))s" >> $S; cat $L/bench/summary.txt >> $S 2>/dev/null
fi
cd /tmp && tar czf $OUT/logs.tgz logs
