#!/usr/bin/env bash
# session 24, H100 (main e73448a): L8 fp8 (fp8 primary weights) profile with its timeline; L8 bf16 profile
set -u
export XDG_CACHE_HOME=/tmp/stepc-xdg
B=gpuwork/build; L=/tmp/logs; mkdir -p $L
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t0=$(date +%s)
F8="models/llama3_8b.lua model.num_layers=8 model.fp8=hybrid model.fp8_recipe=tensorwise model.fp8_param=true"
timeout 120 $B/stepc run $F8 --device cuda --steps 3 --profile --timeline $L/l8f8_tl.json > $L/l8f8_prof.txt 2>&1; echo "l8f8 prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
sed -n "/^class/,/^total/p" $L/l8f8_prof.txt >> $S; grep -E "^step|max allocated" $L/l8f8_prof.txt >> $S
timeout 120 $B/stepc run models/llama3_8b.lua model.num_layers=8 --device cuda --steps 3 --profile --timeline $L/l8_tl.json > $L/l8_prof.txt 2>&1; echo "l8 prof rc=$? $(( $(date +%s)-t0 ))s" >> $S
sed -n "/^class/,/^total/p" $L/l8_prof.txt >> $S; grep -E "^step|max allocated" $L/l8_prof.txt >> $S
cd /tmp && tar czf $OUT/logs.tgz logs
