#!/usr/bin/env bash
# session 23, H100: the router with registers staged, dispatch unrolled: checks; the 6-layer Nemotron's profile and timeline again
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
timeout 120 $B/tests/gpu/gpu_kernels --only basic > $L/basic.log 2>&1; echo "basic rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "router|dispatch|FAIL|checks|FATAL" $L/basic.log >> $S
NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM* model.num_layers=6 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 150 $B/stepc run $NEMO --device cuda --steps 3 --profile --timeline $L/nemo6_timeline.json > $L/nemo6_prof.txt 2>&1; echo "prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
sed -n '/^class/,/^total/p' $L/nemo6_prof.txt >> $S; grep -E "^step|max allocated" $L/nemo6_prof.txt >> $S
BUILD=$B OUT=$L/step ONLY="moe_grads_all|moe_replay$|mamba_grads|mamba_recompute_moe" RUN_TIMEOUT=120 timeout 200 tests/gpu/run_step_tests.sh > $L/step_summary.txt 2>&1; echo "step rc=$? $(( $(date +%s)-t0 ))s" >> $S
grep -E "^--|FAIL" $L/step_summary.txt | cut -c1-160 >> $S
cd /tmp && tar czf $OUT/logs.tgz logs
