#!/usr/bin/env bash
# session 23, H100: a 6-layer Nemotron (MEMEM*: 3 Mamba, 2 MoE, 1 attention; 62 GB planned) profiled with its timeline, to see the routing ops one by one
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
NEMO="models/nemotron3_nano.lua model.hybrid_override_pattern=MEMEM* model.num_layers=6 model.expert_model_parallel_size=1 train.world_size=1 train.global_batch_size=1"
timeout 150 $B/stepc run $NEMO --device cuda --steps 3 --profile --timeline $L/nemo6_timeline.json > $L/nemo6_prof.txt 2>&1; echo "prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
cat $L/nemo6_prof.txt >> $S
cd /tmp && tar czf $OUT/logs.tgz logs
