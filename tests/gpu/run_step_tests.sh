#!/usr/bin/env bash
# run_step_tests.sh — the whole-step GPU tests (tests/gpu/step.c) and short CLI runs, on a machine
# with a GPU. Run from the repository root (or a copy holding build/, models/ and tests/):
#   tests/gpu/run_step_tests.sh
#   ONLY=moe tests/gpu/run_step_tests.sh     (the MLA + MoE tests alone)
#   ONLY=mamba tests/gpu/run_step_tests.sh   (the Mamba kernels and the hybrid recipe alone)
#   ONLY=fp8 tests/gpu/run_step_tests.sh     (the fp8 kernels and steps, both recipes, alone; fp8_moe: with experts)
# BUILD (default build) holds gpu_step and stepc, built elsewhere if this machine has no Lua.
# GPL3 is the text file of the 200-step run (default /usr/share/common-licenses/GPL-3, else
# tests/gpu/data/GPL-3). Logs go to $OUT (or ./gpu-step-logs). ONLY=REGEX runs only the tests whose
# name matches. Exit 0 when every test that ran passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
DEST=${OUT:-gpu-step-logs}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg} # one NVRTC cubin cache for every run below
GPL3=${GPL3:-/usr/share/common-licenses/GPL-3}
[ -r "$GPL3" ] || GPL3=tests/gpu/data/GPL-3
STEP=$BUILD/tests/gpu/gpu_step
GPT_LIKE="model.normalization=LayerNorm model.gated_linear_unit=false model.activation_func=gelu model.add_bias_linear=true model.position_embedding_type=learned_absolute model.share_embeddings_and_output_weights=true"
fails=0
run() { # NAME CMD...
  local name=$1; shift
  [[ -z "${ONLY:-}" || "$name" =~ $ONLY ]] || return 0
  echo "== $name: $*" | tee -a "$DEST/summary.log"
  timeout "${RUN_TIMEOUT:-300}" "$@" >"$DEST/$name.log" 2>&1
  local rc=$?
  grep -E "^(PASS|FAIL|SKIP)" "$DEST/$name.log" | grep -vE "^PASS (layers|embedding|output|final)" | tail -6 | tee -a "$DEST/summary.log"
  echo "-- $name exit $rc" | tee -a "$DEST/summary.log"
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
run_kernels() { # GROUP: gpu_kernels --only GROUP, as the test NAME GROUP_kernels (its checks' summary)
  local name=$1_kernels
  [[ -z "${ONLY:-}" || $name =~ $ONLY ]] || return 0
  echo "== $name: $BUILD/tests/gpu/gpu_kernels --only $1" | tee -a "$DEST/summary.log"
  timeout 300 "$BUILD/tests/gpu/gpu_kernels" --only "$1" >"$DEST/$name.log" 2>&1
  local rc=$?
  grep -E "^(FAIL|[0-9]+ checks)" "$DEST/$name.log" | tee -a "$DEST/summary.log"
  echo "-- $name exit $rc" | tee -a "$DEST/summary.log"
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv 2>/dev/null; } >"$DEST/summary.log"
run grads_tiny $STEP grads models/tiny.lua
run grads_flash $STEP grads models/tiny.lua model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128
run grads_gpt $STEP grads models/tiny.lua $GPT_LIKE
run grads_geglu $STEP grads tests/recipes/tiny_geglu.lua
# loss masks (-100 targets): two micro-batches keeping different counts, the fused cross entropy and
# the chunked output layer dividing by the step's kept count (a device value staged with the
# inputs), against the CPU; then through stepc.h (python): against NumPy's ignore_index mean, an
# all-masked batch refused, a full-iteration graph over steps with different masks = eager bitwise
run masked_tiny $STEP masked models/tiny.lua
run masked_chunks $STEP masked models/tiny.lua model.output_layer_chunks=4
run masked_api python3 tests/python/test_loss_mask.py $BUILD/stepc --device cuda
# Hugging Face transformers' LlamaForCausalLM on stepc's export, stepc on CUDA and on the CPU (exit 77
# where transformers is not installed: TRANSFORMERS_WHEELS=DIR installs it from wheels first)
if [ -n "${TRANSFORMERS_WHEELS:-}" ]; then python3 -m pip install -q --no-index --find-links "$TRANSFORMERS_WHEELS" transformers >"$DEST/pip.log" 2>&1; fi
run transformers_cuda python3 tests/python/test_transformers.py $BUILD/stepc --device cuda
run transformers_cpu python3 tests/python/test_transformers.py $BUILD/stepc --device cpu
# Nemotron's squared-relu MLP (RELU_ACT on CUDA), not gated
run grads_sqrelu $STEP grads models/tiny.lua model.activation_func=squared_relu model.gated_linear_unit=false
run replay_dropout $STEP replay models/tiny.lua 12 model.hidden_dropout=0.1
run replay_flash $STEP replay models/tiny.lua 8 model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128
# scoped graphs (local / transformer_engine) vs eager on the same plan: whole layer, attn, mlp, both;
# with dropout inside the graphs (two micro-batches: each replay must read its micro-batch's seed),
# and with the recompute labels that per-layer graphs allow (their replays inside the graphs)
SCOPES="transformer_engine:[];transformer_engine:[attn];transformer_engine:[mlp];transformer_engine:[attn,mlp];local:[]"
run scoped_dropout $STEP scoped models/tiny.lua 6 "$SCOPES" model.hidden_dropout=0.1
run scoped_recompute $STEP scoped models/tiny.lua 4 "$SCOPES" model.recompute_granularity=selective "model.recompute_modules=[core_attn,mlp]"
run scoped_recompute_ln $STEP scoped models/tiny.lua 4 "$SCOPES" model.hidden_dropout=0.1 model.recompute_granularity=selective "model.recompute_modules=[layernorm]"
run scoped_flash $STEP scoped models/tiny.lua 3 "transformer_engine:[];transformer_engine:[attn];transformer_engine:[mlp]" model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128 model.recompute_granularity=selective "model.recompute_modules=[core_attn]"
run recompute_tiny $STEP recompute models/tiny.lua 4 model.hidden_dropout=0.1
run recompute_flash $STEP recompute models/tiny.lua 3 model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128
# one micro-batch a step (shape M's setting): every linear weight gradient is stored into its main
# gradient and the optimizer skips that gradient's zeroing (compiler/passes/fuse.c FUSE_WGRAD_STORE):
# gradients against the CPU, 60 steps against the CPU's curve (a gradient left unzeroed would add
# up step after step), replay, recompute and scoped graphs bitwise, the optimizer's launches
ONE=train.global_batch_size=4
run grads_one_micro $STEP grads models/tiny.lua $ONE
run train_one_micro $STEP train models/tiny.lua 60 tests/gpu/data/tiny_gpl3_1micro_60.cpu.json $ONE data.path=$GPL3
run replay_one_micro $STEP replay models/tiny.lua 8 $ONE model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128
run recompute_one_micro $STEP recompute models/tiny.lua 3 $ONE
run scoped_one_micro $STEP scoped models/tiny.lua 4 "transformer_engine:[];transformer_engine:[attn];local:[]" $ONE
run optim_one_micro $STEP optim models/tiny.lua 4 $ONE
# rows wider than the norm kernels keep in registers (2560 > 2048: read a tile at a time) and
# head size 128 through the fused QKV RoPE, against the CPU
run grads_wide $STEP grads models/tiny.lua model.hidden_size=2560 model.num_attention_heads=20
# Llama 3's RoPE scaling (model.rope_scaling, factor 32 as Llama 3.2) through the fused QKV RoPE and
# the standalone kernels (recompute replays the RoPE), against the CPU reference; seq 1024 at base
# 500000 and head size 64 puts positions far enough out for the scaled bands to turn by radians
ROPE_SCALED="model.hidden_size=256 model.num_attention_heads=4 model.seq_length=1024 train.micro_batch_size=1 model.rotary_base=500000 model.rope_scaling=true model.rope_scaling_factor=32"
run grads_rope_scaling $STEP grads models/tiny.lua $ROPE_SCALED
run recompute_rope_scaling $STEP recompute models/tiny.lua 3 $ROPE_SCALED
# cuDNN fused attention (runtime/cudnn.c): gradients against the CPU; with deterministic_mode the
# replay, recompute (core_attn replays the attention) and scoped graphs bitwise equal to eager
FUSED="model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128 model.attention_backend=fused"
run grads_fused $STEP grads models/tiny.lua $FUSED
run grads_fused_nondet $STEP grads models/tiny.lua $FUSED model.deterministic_mode=false
run replay_fused $STEP replay models/tiny.lua 8 $FUSED model.deterministic_mode=true
run recompute_fused $STEP recompute models/tiny.lua 3 $FUSED model.deterministic_mode=true
run scoped_fused $STEP scoped models/tiny.lua 3 "transformer_engine:[];transformer_engine:[attn]" $FUSED model.deterministic_mode=true model.recompute_granularity=selective "model.recompute_modules=[core_attn]"
# deterministic_mode under attention_backend=auto at head dim 64: cuDNN's forward, stepc's own
# deterministic backward (ir/ops/flash.c det_backward_on_flash): gradients against the CPU, replay
# and recompute bitwise equal to eager
AUTO_DET="model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128 model.attention_backend=auto model.deterministic_mode=true"
run grads_auto_det $STEP grads models/tiny.lua $AUTO_DET
run replay_auto_det $STEP replay models/tiny.lua 8 $AUTO_DET
run recompute_auto_det $STEP recompute models/tiny.lua 3 $AUTO_DET
# the GPT-3 paper setting: unfused attention (cuBLASLt per-head GEMMs + causal softmax), dropout
# 0.1 on the probabilities and hidden states (gpt3_tiny is an fp32 recipe: bf16=true for CUDA)
GPT3=tests/recipes/gpt3_tiny.lua
run grads_gpt3_unfused $STEP grads $GPT3 model.bf16=true model.attention_dropout=0 model.hidden_dropout=0
run replay_gpt3_dropout $STEP replay $GPT3 6 model.bf16=true
run recompute_gpt3_dropout $STEP recompute $GPT3 3 model.bf16=true
run scoped_gpt3_dropout $STEP scoped $GPT3 6 "$SCOPES" model.bf16=true
# core_attn replays inside the graphs only without attention dropout (MCORE-56 / STEPC-42)
run scoped_gpt3_recompute $STEP scoped $GPT3 4 "transformer_engine:[];transformer_engine:[attn];local:[]" model.bf16=true model.attention_dropout=0 model.recompute_granularity=selective "model.recompute_modules=[core_attn]"
# the output layer and loss in chunks (model.output_layer_chunks, ir/ops/linear_loss.c; the
# backward inside the forward's launch, FUSE_LOSS_BWD): gradients against the CPU reference (which
# runs the backward op alone), untied (tiny), tied (gpt3_tiny), over two micro-batches and one;
# replay == eager, each recompute setting == none, scoped graphs == eager, bitwise; the 200-step
# curve against the CPU's unchunked one (the chunked step differs from it only in the weight
# gradient's summation order); the large recipes whose peak it lowers, predicted against measured
CH4=model.output_layer_chunks=4
run chunks_grads_tiny $STEP grads models/tiny.lua $CH4
run chunks_grads_one_micro $STEP grads models/tiny.lua $CH4 $ONE
run chunks_grads_flash $STEP grads models/tiny.lua $CH4 model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128
run chunks_grads_gpt3_tied $STEP grads $GPT3 model.bf16=true model.attention_dropout=0 model.hidden_dropout=0 $CH4
run chunks_replay_tiny $STEP replay models/tiny.lua 8 $CH4 model.hidden_dropout=0.1
run chunks_replay_gpt3_tied $STEP replay $GPT3 6 model.bf16=true $CH4
run chunks_recompute_tiny $STEP recompute models/tiny.lua 4 $CH4 model.hidden_dropout=0.1
run chunks_recompute_gpt3 $STEP recompute $GPT3 3 model.bf16=true $CH4
run chunks_scoped_tiny $STEP scoped models/tiny.lua 4 "$SCOPES" $CH4 model.hidden_dropout=0.1
run chunks_optim_tiny $STEP optim models/tiny.lua 3 $CH4
run chunks_moe_grads $STEP grads tests/recipes/tiny_mla_moe.lua model.bf16=true model.moe_router_topk=8 $CH4
run chunks_train_gpl3 $STEP train models/tiny.lua 200 tests/gpu/data/tiny_gpl3_200.cpu.json data.path=$GPL3 $CH4
run chunks_cli_graph $BUILD/stepc run models/tiny.lua --device cuda --steps 30 data.path=$GPL3 $CH4 model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
RUN_TIMEOUT=900 run chunks_cli_bench_m $BUILD/stepc run models/bench_m.lua --device cuda --steps 5
RUN_TIMEOUT=900 run chunks_cli_moonlight_mha_7l $BUILD/stepc run models/moonlight_mha_7l.lua --device cuda --steps 5
RUN_TIMEOUT=900 run chunks_cli_moonlight_whole $BUILD/stepc run models/moonlight_mha_7l.lua --device cuda --steps 5 model.output_layer_chunks=1
# the optimizer's multi-tensor launches (optimizer.multi_tensor, the default) against the per-tensor
# ones (bitwise with clipping off), replay == eager, the first step's norm and loss against the CPU
run optim_tiny $STEP optim models/tiny.lua 4
run optim_wide $STEP optim models/tiny.lua 3 model.hidden_size=512 model.num_attention_heads=8 model.ffn_hidden_size=1408 model.seq_length=128
run optim_gpt3 $STEP optim $GPT3 3 model.bf16=true model.attention_dropout=0 model.hidden_dropout=0
# --gemm-tuning: cuBLASLt's algorithms timed at open train as the first-ranked ones do (bf16 and fp8)
run gemm_tuning tests/gpu/gemm_tuning.sh $BUILD/stepc $GPL3
run cli_gpt3_eager $BUILD/stepc run $GPT3 --device cuda --steps 20 model.bf16=true
run cli_gpt3_graph $BUILD/stepc run $GPT3 --device cuda --steps 20 model.bf16=true model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
# flash with attention dropout is not built on CUDA: a clear refusal (exit 4), never a crash
if [[ -z "${ONLY:-}" || cli_flash_dropout_refused =~ $ONLY ]]; then
  echo "== cli_flash_dropout_refused" | tee -a "$DEST/summary.log"
  timeout 120 $BUILD/stepc run $GPT3 --device cuda --steps 1 model.bf16=true model.attention_backend=flash >"$DEST/cli_flash_dropout_refused.log" 2>&1
  rc=$?
  grep -q "attention dropout inside flash" "$DEST/cli_flash_dropout_refused.log" && [ $rc -eq 4 ] && echo "PASS exit 4 with the message" | tee -a "$DEST/summary.log" ||
    { echo "FAIL exit $rc: $(tail -2 "$DEST/cli_flash_dropout_refused.log")" | tee -a "$DEST/summary.log"; fails=$((fails + 1)); }
fi
# MLA + MoE (tests/recipes/tiny_mla_moe.lua, an fp32 recipe: bf16=true for CUDA): every override the
# recipe lists, gradients against the CPU reference; replay == eager and each recompute label ==
# none, bitwise; the CLI eagerly and as one full-iteration graph. ONLY=moe runs these alone.
MOE=tests/recipes/tiny_mla_moe.lua
CAP=model.moe_expert_capacity_factor=1.0
# Gradients against the CPU with top-k = all 8 experts: the GPU's router logits are bf16 and the
# CPU's fp32, so with top-2 a near-tie flips a token's experts and moves its share of the expert and
# router gradients (measured: 5 of 42 gradients off by 7-24% rel_l2 while the loss agrees to 2e-5,
# bench/logs/2026-12-01-moe/moe_grads_top2.log). With every expert selected nothing can flip, and
# a capacity factor of 0.5 still drops (by position) and pads. Top-k selection itself is checked
# by the loss and by replay/recompute below, which run the recipe's top-2.
ALL=model.moe_router_topk=8
HALF=model.moe_expert_capacity_factor=0.5
run moe_grads_all_experts $STEP grads $MOE model.bf16=true $ALL
run moe_grads_capacity $STEP grads $MOE model.bf16=true $ALL $HALF
run moe_grads_pad $STEP grads $MOE model.bf16=true $ALL $HALF model.moe_pad_expert_input_to_capacity=true
run moe_grads_no_shared $STEP grads $MOE model.bf16=true $ALL model.moe_shared_expert_intermediate_size=null
run moe_grads_unfused $STEP grads $MOE model.bf16=true $ALL model.attention_backend=unfused
run moe_grads_no_q_lora $STEP grads $MOE model.bf16=true $ALL model.q_lora_rank=null
run moe_grads_fused $STEP grads $MOE model.bf16=true $ALL model.attention_backend=fused
run moe_grads_odd_ffn $STEP grads $MOE model.bf16=true $ALL model.moe_ffn_hidden_size=12
run moe_replay $STEP replay $MOE 6 model.bf16=true
run moe_replay_capacity $STEP replay $MOE 6 model.bf16=true $CAP
run moe_replay_pad_unfused $STEP replay $MOE 6 model.bf16=true $CAP model.moe_pad_expert_input_to_capacity=true model.attention_backend=unfused
MOE_LABELS=moe_act,moe,shared_experts,mla_up_proj,layernorm,core_attn
run moe_recompute $STEP recompute $MOE 3 --labels $MOE_LABELS model.bf16=true
run moe_recompute_capacity $STEP recompute $MOE 3 --labels $MOE_LABELS model.bf16=true $CAP
run moe_recompute_unfused $STEP recompute $MOE 3 --labels $MOE_LABELS model.bf16=true model.attention_backend=unfused
# MLA under cuDNN fused attention: q/k head dim 24 (16 + rope 8), v 16, not padded (FLASH_ATTN_DV)
FUSED_DET="model.attention_backend=fused model.deterministic_mode=true"
run moe_replay_fused $STEP replay $MOE 6 model.bf16=true $FUSED_DET
run moe_recompute_fused $STEP recompute $MOE 3 --labels $MOE_LABELS model.bf16=true $FUSED_DET
# scoped graphs on an MLA + MoE recipe (the scopes Megatron allows for MoE: the whole layer,
# attn, moe_router, moe_preprocess; local per-layer graphs), each bitwise equal to eager, dropless
# (the grouped GEMMs read the per-expert counts on the device) and with a capacity; and under
# moe / moe_act recompute
MOE_SCOPES="transformer_engine:[];transformer_engine:[attn];transformer_engine:[moe_router];transformer_engine:[moe_router,moe_preprocess];transformer_engine:[attn,moe_router,moe_preprocess];local:[]"
run moe_scoped $STEP scoped $MOE 4 "$MOE_SCOPES" model.bf16=true
# with a capacity factor Megatron's alltoall preprocess syncs with the host, so no moe_preprocess
# graph (MCORE-48 refuses it)
run moe_scoped_capacity $STEP scoped $MOE 4 "transformer_engine:[];transformer_engine:[attn];transformer_engine:[moe_router];local:[]" model.bf16=true $CAP
run moe_scoped_recompute $STEP scoped $MOE 3 "transformer_engine:[attn];transformer_engine:[moe_router,moe_preprocess];local:[]" model.bf16=true model.recompute_granularity=selective "model.recompute_modules=[moe_act,layernorm]"
run moe_train_gpl3 $STEP train $MOE 200 tests/gpu/data/tiny_mla_moe_gpl3_200.cpu.json model.bf16=true data.mock=false data.path=$GPL3
run moe_cli_eager $BUILD/stepc run $MOE --device cuda --steps 20 model.bf16=true
run moe_cli_graph $BUILD/stepc run $MOE --device cuda --steps 20 model.bf16=true model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
# The hybrid Mamba / attention / MLP / MoE stack (tests/recipes/tiny_hybrid.lua, pattern M*M-ME:
# MAMBA_MIXER, MAMBA_GATE, MAMBA_GROUP_NORM on CUDA, kernels/mamba.cuh). ONLY=mamba runs these and
# the Mamba kernel tests alone: the kernels against ir/ops/mamba.c in fp64; gradients against the
# CPU (every expert selected, as the MoE tests, so no near-tie flips a token's experts); replay ==
# eager and each recompute setting the validator takes for hybrids == none, bitwise; scoped
# graphs (the whole layer, Megatron's mamba scope, attn) == eager; 200 steps on the GPL-3 text
# against the CPU's curve (the drop within 10%, as tiny's and MoE's); the CLI eagerly and as one
# full-iteration graph.
HYB=tests/recipes/tiny_hybrid.lua
HYB_ALL=model.moe_router_topk=4
run_kernels mamba
run mamba_grads $STEP grads $HYB $HYB_ALL
run mamba_replay $STEP replay $HYB 6
run mamba_replay_dropout $STEP replay $HYB 6 model.hidden_dropout=0.1
run mamba_recompute $STEP recompute $HYB 3
run mamba_recompute_moe $STEP recompute $HYB 3 --labels moe,moe_act
run mamba_scoped $STEP scoped $HYB 4 "transformer_engine:[];transformer_engine:[mamba];transformer_engine:[attn,mamba];local:[]"
run mamba_train_gpl3 $STEP train $HYB 200 tests/gpu/data/tiny_hybrid_gpl3_200.cpu.json data.mock=false data.path=$GPL3
run mamba_cli_eager $BUILD/stepc run $HYB --device cuda --steps 20
run mamba_cli_graph $BUILD/stepc run $HYB --device cuda --steps 20 model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
# fp8 (ir/ops/fp8.c): current scaling and delayed scaling (Transformer Engine's DelayedScaling, Megatron's
# default recipe; its amax histories and scales are device state the launch program updates). ONLY=fp8
# runs these alone: the casts and the delayed update kernel exactly (gpu_kernels --only fp8); the first
# step against the CPU's emulation of the same casts (scale 1 under delayed); eager twice and eager vs
# the full-iteration graph, each recompute label vs none, scoped graphs vs eager, bitwise (losses and every
# persistent tensor, the scaling states included), over enough steps that every scale has moved; a
# checkpoint resumed bitwise; the CLI eagerly and as one graph
run_kernels fp8
F8T="model.fp8=hybrid model.fp8_recipe=tensorwise"
F8D="model.fp8=hybrid model.fp8_recipe=delayed"
F8D4="$F8D model.fp8_amax_history_len=4 model.fp8_amax_compute_algo=max model.fp8_margin=1"
run fp8_grads_tensorwise $STEP grads models/tiny.lua $F8T
run fp8_grads_delayed $STEP grads models/tiny.lua $F8D
run fp8_grads_delayed_one_micro $STEP grads models/tiny.lua $F8D4 $ONE
run fp8_replay_tensorwise $STEP replay models/tiny.lua 6 $F8T
run fp8_replay_delayed $STEP replay models/tiny.lua 8 $F8D
run fp8_replay_delayed_h4 $STEP replay models/tiny.lua 8 $F8D4
run fp8_recompute_tensorwise $STEP recompute models/tiny.lua 3 $F8T
run fp8_recompute_delayed $STEP recompute models/tiny.lua 4 --labels core_attn,mlp,mlp_act,full $F8D4
run fp8_scoped_delayed $STEP scoped models/tiny.lua 4 "transformer_engine:[];transformer_engine:[attn];transformer_engine:[mlp];local:[]" $F8D4
run fp8_resume_delayed tests/api/resume.sh $BUILD/stepc $BUILD/examples/train_text cuda tests/recipes/tiny_fp8_delayed.lua
run fp8_cli_delayed_eager $BUILD/stepc run models/tiny.lua --device cuda --steps 30 data.path=$GPL3 $F8D
run fp8_cli_delayed_graph $BUILD/stepc run models/tiny.lua --device cuda --steps 30 data.path=$GPL3 $F8D model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
# fp8 with routed experts (Transformer Engine's grouped fp8 linears: each expert's casts with its own
# scale, the products in the fp8 TMA grouped GEMMs, kernels/moe.cuh): tiny_mla_moe_fp8 in bf16 with
# the MLA rope dim at 16 (every fp8 operand's widths multiples of 16): the first step against the CPU's
# emulation, eager twice, the graph, recompute labels and scoped graphs bitwise, both recipes
F8MOE=tests/recipes/tiny_mla_moe_fp8.lua
F8MOE_OV="model.bf16=true model.qk_pos_emb_head_dim=16" # after gpu_step's positional arguments
run fp8_moe_grads_tensorwise $STEP grads $F8MOE $F8MOE_OV
run fp8_moe_grads_delayed $STEP grads $F8MOE $F8MOE_OV model.fp8_recipe=delayed
run fp8_moe_grads_one_micro $STEP grads $F8MOE $F8MOE_OV $ONE
run fp8_moe_grads_param $STEP grads $F8MOE $F8MOE_OV model.fp8_param=true
run fp8_moe_replay_tensorwise $STEP replay $F8MOE 6 $F8MOE_OV
run fp8_moe_replay_delayed $STEP replay $F8MOE 8 $F8MOE_OV model.fp8_recipe=delayed
run fp8_moe_recompute_tensorwise $STEP recompute $F8MOE 3 --labels moe,moe_act,mlp,core_attn $F8MOE_OV
run fp8_moe_recompute_delayed $STEP recompute $F8MOE 3 --labels moe,core_attn $F8MOE_OV model.fp8_recipe=delayed
run fp8_moe_scoped $STEP scoped $F8MOE 4 "transformer_engine:[];transformer_engine:[attn];local:[]" $F8MOE_OV
run fp8_moe_cli_graph $BUILD/stepc run $F8MOE $F8MOE_OV --device cuda --steps 30 model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
run train_gpl3 $STEP train models/tiny.lua 200 tests/gpu/data/tiny_gpl3_200.cpu.json data.path=$GPL3
run cli_tiny_eager $BUILD/stepc run models/tiny.lua --device cuda --steps 30 data.path=$GPL3
run cli_tiny_graph $BUILD/stepc run models/tiny.lua --device cuda --steps 30 data.path=$GPL3 model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
run cli_tiny_scoped $BUILD/stepc run models/tiny.lua --device cuda --steps 30 data.path=$GPL3 model.cuda_graph_impl=transformer_engine "model.cuda_graph_modules=[attn]"
# the first step against PyTorch on the same weights and batch (cpu and cuda dumps; its own summary
# in $DEST/torch_ref_summary.log)
RUN_TIMEOUT=1200 run torch_ref env -u ONLY BUILD=$BUILD OUT=$DEST tests/gpu/run_torch_ref.sh
[ -r "$DEST/cli_tiny_graph.log" ] && tail -12 "$DEST/cli_tiny_graph.log"
[ -r "$DEST/cli_tiny_scoped.log" ] && tail -12 "$DEST/cli_tiny_scoped.log"
[ -r "$DEST/cli_gpt3_eager.log" ] && tail -12 "$DEST/cli_gpt3_eager.log"
for f in chunks_cli_bench_m chunks_cli_moonlight_mha_7l chunks_cli_moonlight_whole; do [ -r "$DEST/$f.log" ] && tail -12 "$DEST/$f.log"; done
echo "== $fails failed" | tee -a "$DEST/summary.log"
exit $((fails > 0))
