#!/usr/bin/env bash
# Megatron-Core's own peak beside stepc's prediction, one configuration at a time, on the GPU machine.
#
#   OUT=DIR MEGATRON_PATH=gpuwork/megatron bench/megatron_vs_plan.sh [--quick] [--only REGEX]
#
# For each configuration below: bench/megatron_step.py (Megatron-Core's GPTModel with the local layer
# spec, one process each) prints max_memory_allocated() after iterations 1 and 2, and
# `stepc plan models/bench_m.lua ... train.megatron_job=true --json` gives the per-rank report's
# logged_after_iteration_1/2_bytes for the same job. Writes $OUT/megatron_vs_plan.csv and .md (config,
# Megatron 1 / 2, stepc 1 / 2, ratio stepc / Megatron), $OUT/logs/NAME.{megatron,plan}.* and
# $OUT/summary.txt. PASS when every configuration that ran has both readings within 2%; a Megatron
# out-of-memory is reported as such beside stepc's fits verdict (the H200's memory as PyTorch sees it).
# A configuration marked "-" in the quick column is not runnable under Megatron's local spec: its row
# shows stepc's prediction only, "not runnable with the local spec", and counts neither way. The MLA
# rows are: MLASelfAttention builds its core attention with k_channels and v_channels
# (transformer/multi_latent_attention.py), and the local spec's core attention is DotProductAttention
# (megatron/core/models/backends.py), whose __init__ takes neither (d98e8a64dd; the H200 run of
# 2026-12-04 failed so). The `layernorm` row needs Transformer Engine: the output-discard recompute
# (tensor_parallel/random.py, CheckpointWithoutOutput) sets `self.fp8 = fp8 is not None`, true for
# its default fp8=False, and so always calls TE's FP8GlobalStateManager (a NameError without TE:
# the H200 run of 2026-12-04, session 8, bench/logs/2026-12-04-s8-gpu/call4/mega.tgz).
# stepc: $STEPC, else build/stepc, else gpuwork/stepc. The full set takes about 5 minutes on an H200,
# --quick about 1.5.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output folder}"
MEGATRON_PATH=${MEGATRON_PATH:-gpuwork/megatron}
export MEGATRON_PATH
STEPC=${STEPC:-}
[ -n "$STEPC" ] || { [ -x build/stepc ] && STEPC=build/stepc; } || STEPC=gpuwork/stepc
QUICK=0 ONLY=.
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --only) ONLY=$2; shift ;;
    *) echo "usage: $0 [--quick] [--only REGEX]" >&2; exit 3 ;;
  esac
  shift
done
mkdir -p "$OUT/logs"
[ -d "$MEGATRON_PATH/megatron/core" ] || { echo "no megatron/core under MEGATRON_PATH=$MEGATRON_PATH" | tee "$OUT/summary.txt"; exit 2; }
[ -x "$STEPC" ] || { echo "no stepc binary ($STEPC)" | tee "$OUT/summary.txt"; exit 2; }
GIB=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory / 2**30)' 2>/dev/null || echo 139)

# name | quick (1: in --quick; -: not runnable with the local spec) | megatron_step.py flags | stepc overrides. Every row: bench_m's
# width (d2048, 32 heads, ffn 8192, vocab 128256), bf16, 4 layers, seq 4096, micro-batch 2 unless the
# flags say otherwise; the two columns must describe the same job. moe_act needs grouped GEMM in Megatron
# (MCORE-24), which the local spec's SequentialMLP is not, so the MoE rows use moe and shared_experts.
CONFIGS=$(cat <<'T'
dense_none|1|--variant none|
dense_core_attn|1|--variant core_attn|model.recompute_granularity=selective model.recompute_modules=[core_attn]
dense_mlp|0|--variant mlp|model.recompute_granularity=selective model.recompute_modules=[mlp]
dense_layernorm|-|--variant layernorm|model.recompute_granularity=selective model.recompute_modules=[layernorm]
dense_core_attn_mlp|0|--variant core_attn+mlp|model.recompute_granularity=selective model.recompute_modules=[core_attn,mlp]
dense_full_uniform1|0|--variant full|model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
dense_full_block2|0|--variant full:block:2|model.recompute_granularity=full model.recompute_method=block model.recompute_num_layers=2
dense_none_sm16|1|--variant none --softmax-fp32 0|model.attention_softmax_in_fp32=false
dense_mlp_sm16|0|--variant mlp --softmax-fp32 0|model.attention_softmax_in_fp32=false model.recompute_granularity=selective model.recompute_modules=[mlp]
mha_s2048_b4_l2|0|--variant none --layers 2 --seq 2048 --mbs 4 --groups 32|model.num_layers=2 model.seq_length=2048 train.micro_batch_size=4 model.num_query_groups=32 train.global_batch_size=4
gqa4_tied_s2048_b1_l6|0|--variant none --layers 6 --seq 2048 --mbs 1 --groups 4 --tied|model.num_layers=6 model.seq_length=2048 train.micro_batch_size=1 model.num_query_groups=4 model.share_embeddings_and_output_weights=true train.global_batch_size=1
moe8_top2|1|--variant none --layers 2 --seq 2048 --mbs 1 --experts 8 --topk 2 --moe-ffn 2048|model.num_layers=2 model.seq_length=2048 train.micro_batch_size=1 model.num_moe_experts=8 model.moe_router_topk=2 model.moe_ffn_hidden_size=2048 model.moe_token_dispatcher_type=alltoall train.global_batch_size=1
moe8_top2_shared_cap1_shared_experts|0|--variant shared_experts --layers 2 --seq 2048 --mbs 1 --experts 8 --topk 2 --moe-ffn 2048 --shared-ffn 2048 --capacity 1.0|model.num_layers=2 model.seq_length=2048 train.micro_batch_size=1 model.num_moe_experts=8 model.moe_router_topk=2 model.moe_ffn_hidden_size=2048 model.moe_token_dispatcher_type=alltoall model.moe_shared_expert_intermediate_size=2048 model.moe_expert_capacity_factor=1.0 model.recompute_granularity=selective model.recompute_modules=[shared_experts] train.global_batch_size=1
moe16_top4_moe|0|--variant moe --layers 2 --seq 2048 --mbs 1 --experts 16 --topk 4 --moe-ffn 1024 --softmax-fp32 0|model.num_layers=2 model.seq_length=2048 train.micro_batch_size=1 model.num_moe_experts=16 model.moe_router_topk=4 model.moe_ffn_hidden_size=1024 model.moe_token_dispatcher_type=alltoall model.attention_softmax_in_fp32=false model.recompute_granularity=selective model.recompute_modules=[moe] train.global_batch_size=1
mla_none|-|--variant none --layers 2 --seq 2048 --mbs 1 --mla --groups 32|model.num_layers=2 model.seq_length=2048 train.micro_batch_size=1 model.multi_latent_attention=true model.num_query_groups=32 model.kv_lora_rank=512 model.qk_head_dim=128 model.qk_pos_emb_head_dim=64 model.v_head_dim=128 train.global_batch_size=1
mla_up_proj_core_attn_sm16|-|--variant mla_up_proj+core_attn --layers 2 --seq 2048 --mbs 1 --mla --groups 32 --softmax-fp32 0|model.num_layers=2 model.seq_length=2048 train.micro_batch_size=1 model.multi_latent_attention=true model.num_query_groups=32 model.kv_lora_rank=512 model.qk_head_dim=128 model.qk_pos_emb_head_dim=64 model.v_head_dim=128 model.attention_softmax_in_fp32=false model.recompute_granularity=selective model.recompute_modules=[mla_up_proj,core_attn] train.global_batch_size=1
T
)
BASE="model.transformer_impl=local model.attention_backend=unfused model.cross_entropy_loss_fusion=false model.num_layers=4 train.micro_batch_size=2 train.global_batch_size=2 train.world_size=1 train.megatron_job=true train.usable_device_memory_gib=$GIB"
CSV=$OUT/megatron_vs_plan.csv MD=$OUT/megatron_vs_plan.md
echo "config,megatron_it1_gb,megatron_it2_gb,stepc_it1_gb,stepc_it2_gb,ratio_it1,ratio_it2,megatron_outcome,stepc_fits,verdict" > "$CSV"
{ echo "| config | Megatron-Core 1 / 2 GB | stepc logged 1 / 2 GB | stepc / Megatron | Megatron ran | stepc fits | within 2% |"
  echo "|---|---|---|---|---|---|---|"; } > "$MD"
pass=0 fail=0 skip=0 t0=$(date +%s)
while IFS='|' read -r name quick mflags sov; do
  [ -n "$name" ] || continue
  [ "$QUICK" = 1 ] && [ "$quick" != 1 ] && continue
  echo "$name" | grep -Eq -- "$ONLY" || continue
  L=$OUT/logs/$name
  # shellcheck disable=SC2086
  "$STEPC" plan models/bench_m.lua $BASE $sov --json > "$L.plan.json" 2> "$L.plan.err"
  read -r s1 s2 fits < <(python3 - "$L.plan.json" <<'P'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["ranks"][0]
    tot = r.get("device_total_bytes", r["max_allocated_bytes"])
    print(r["logged_after_iteration_1_bytes"] / 1e9, r["logged_after_iteration_2_bytes"] / 1e9, r.get("fits", "?"))
except Exception as e:
    print("nan nan error")
P
)
  if [ "$quick" = - ]; then
    echo "$name,,,$s1,$s2,,,not-runnable-local-spec,$fits,SKIP" >> "$CSV"
    printf '| %s | not runnable with the local spec | %.3f / %.3f | | | %s | SKIP |\n' "$name" "$s1" "$s2" "$fits" >> "$MD"
    echo "SKIP $name: Megatron's local spec cannot build it; stepc $s1 / $s2 (fits $fits)"
    skip=$((skip + 1))
    continue
  fi
  # shellcheck disable=SC2086
  timeout 240 python3 bench/megatron_step.py $mflags --steps 3 --tag "$name" > "$L.megatron.log" 2>&1
  read -r m1 m2 outcome < <(python3 - "$L.megatron.log" <<'P'
import json, sys
j = None
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("JSON "):
        j = json.loads(line[5:])
if not j:
    print("nan nan no-output")
elif "error" in j:
    print("nan nan", "out-of-memory" if "out of memory" in j["error"].lower() else "error")
else:
    print(j["max_alloc_after_it1"] / 1e9, j["max_alloc_after_it2"] / 1e9, "ran")
P
)
  verdict=$(python3 -c "
import math,sys
m1,m2,s1,s2=map(float,sys.argv[1:5]); o=sys.argv[5]; f=sys.argv[6]
if o=='out-of-memory': print('PASS' if f in ('False','false','no') else 'FAIL'); sys.exit()
if o!='ran' or math.isnan(s1): print('FAIL'); sys.exit()
print('PASS' if abs(s1/m1-1)<=0.02 and abs(s2/m2-1)<=0.02 else 'FAIL')" "$m1" "$m2" "$s1" "$s2" "$outcome" "$fits")
  r1=$(python3 -c "import sys; a,b=map(float,sys.argv[1:]); print(f'{a/b:.4f}' if b==b and b else 'nan')" "$s1" "$m1")
  r2=$(python3 -c "import sys; a,b=map(float,sys.argv[1:]); print(f'{a/b:.4f}' if b==b and b else 'nan')" "$s2" "$m2")
  echo "$name,$m1,$m2,$s1,$s2,$r1,$r2,$outcome,$fits,$verdict" >> "$CSV"
  printf '| %s | %.3f / %.3f | %.3f / %.3f | %s / %s | %s | %s | %s |\n' "$name" "$m1" "$m2" "$s1" "$s2" "$r1" "$r2" "$outcome" "$fits" "$verdict" >> "$MD"
  echo "$verdict $name: megatron $m1 / $m2 ($outcome), stepc $s1 / $s2 (fits $fits) [$(( $(date +%s) - t0 )) s]"
  if [ "$verdict" = PASS ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done <<< "$CONFIGS"
{ echo "stepc $($STEPC version 2>/dev/null | head -1), Megatron-Core from $MEGATRON_PATH, $(python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' 2>/dev/null)"
  echo "$pass passed, $fail failed, $skip not runnable with the local spec, $(( $(date +%s) - t0 )) s"; } | tee "$OUT/summary.txt"
cat "$MD"
[ "$fail" = 0 ]
