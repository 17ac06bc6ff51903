#!/usr/bin/env bash
# tp.sh STEPC TEST_DP PROGRAM_PLAY — tensor parallelism on the CPU device (issue 25): models/tiny.lua (GQA 4 heads /
# 2 groups, SwiGLU, RMSNorm, RoPE, untied vocab-parallel embedding and output layer) in fp32 weights,
#   TP 2, TP 2 with sequence parallelism, and TP 2 x DP 2 (4 ranks, TP fastest), 4 steps each, against
# the one-rank step: every step's loss and grad norm, and every parameter after the steps (the TP
# run's gathered into the one-rank layout by stepc_save_params), within fp32 tolerances (below); the
# ranks of a run agree bitwise; with attention and hidden dropout (0.1), TP 2 (flash attention) and
# TP 2 + SP (unfused attention) against the one-rank run with the same dropout: every rank draws its
# slice of the one-rank mask; with linear biases (column-parallel biases split, row-parallel ones added
# once after the reduction: BIAS_ADD), TP 2 and TP 2 + SP; GPT-3's layout (gpt3_tiny: all of it, with
# LayerNorm, GELU, learned positions, tied embeddings) at TP 2 and TP 2 + SP (each rank adds its
# sequence rows' positions); stepc_eval's loss and log-probs at TP 2 and TP 2 + SP. Then what stays
# refused: MoE with tensor-parallel experts (ETP = TP),
# TP x ZeRO-1, fewer KV groups than TP, PP, CP, EP (exit 4 naming the field and the recipe's line);
# TP on the cuda device: the launch programs played on a recording device. Checkpoints: a TP 2 and a TP 2 x DP 2 run resumed = the
# uninterrupted run bitwise; another layout refused at load; one-rank parameters loaded into TP 2.
#
# Why not bitwise: a row-parallel linear (linear_proj, linear_fc2) and the vocab-parallel embedding
# sum TP partial results (each rank's half of the contraction) where one rank runs one GEMM over
# the whole contraction; the vocab-parallel loss takes its log-sum-exp in two halves; the grad norm
# adds the shards' sums of squares in another order. Each changes fp32 rounding (about 1e-7
# relative). Adam then divides each gradient element by its own RMS, so an element whose gradient
# is near zero (an embedding row of a token seen once) moves by up to lr a step whatever rounding
# did to it: the parameters differ by up to ~1e-5 where the 4 steps move them by up to 3e-3 (the
# summed lr, warm-up 3e-4 .. 1.2e-3); a wrongly cut or placed shard differs by the weights' own
# scale (init std 0.02). Tolerances: loss and grad norm 1e-5 relative; every parameter within
# 5e-5 absolute (measured largest: about 1.2e-5, in linear_fc2).
set -uo pipefail
stepc=$1 t=$2 play=$3
tmp=${TP_KEEP:-$(mktemp -d)}
trap '[ -n "${TP_KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
STEPS=4
build() { "$stepc" build ${RECIPE:-models/tiny.lua} model.bf16=false "${@:2}" -o "$tmp/$1" >"$tmp/$1.log" 2>&1 || { cat "$tmp/$1.log"; fail "stepc build $1"; }; }
build one
DROP="model.attention_dropout=0.1 model.hidden_dropout=0.1"
build one_drop $DROP
build one_drop_unfused $DROP model.attention_backend=unfused
build one_bias model.add_bias_linear=true
build tp2 model.tensor_model_parallel_size=2 train.world_size=2
build tp2drop model.tensor_model_parallel_size=2 train.world_size=2 $DROP
build sp2drop_unfused model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true $DROP model.attention_backend=unfused
build tp2bias model.tensor_model_parallel_size=2 train.world_size=2 model.add_bias_linear=true
build sp2bias model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true model.add_bias_linear=true
# GPT-3's layout (tests/recipes/gpt3_tiny.lua: LayerNorm, GELU, biases, learned positions, unfused
# attention, dropout 0.1, tied embeddings) at TP 2
RECIPE=tests/recipes/gpt3_tiny.lua build g3one
RECIPE=tests/recipes/gpt3_tiny.lua build g3tp2 model.tensor_model_parallel_size=2 train.world_size=2
RECIPE=tests/recipes/gpt3_tiny.lua build g3sp2 model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true
build sp2 model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true
# multi-latent attention (tests/recipes/tiny_mla.lua): the down projections duplicated, the up
# projections column-parallel by heads, linear_proj row-parallel; with and without q_lora_rank,
# with SP (the down projections on the rank's rows, the latents and k_pos_emb gathered), attention
# and hidden dropout 0.1 (unfused: each rank its heads' slice of the one-rank mask)
RECIPE=tests/recipes/tiny_mla.lua build mlaone
RECIPE=tests/recipes/tiny_mla.lua build mlatp2 model.tensor_model_parallel_size=2 train.world_size=2
RECIPE=tests/recipes/tiny_mla.lua build mlaone_nq model.q_lora_rank=null
RECIPE=tests/recipes/tiny_mla.lua build mlatp2_nq model.tensor_model_parallel_size=2 train.world_size=2 model.q_lora_rank=null
RECIPE=tests/recipes/tiny_mla.lua build mlasp2 model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true
RECIPE=tests/recipes/tiny_mla.lua build mlaone_drop $DROP model.attention_backend=unfused
RECIPE=tests/recipes/tiny_mla.lua build mlatp2_drop model.tensor_model_parallel_size=2 train.world_size=2 $DROP model.attention_backend=unfused
RECIPE=tests/recipes/tiny_mla.lua build mlasp2_drop model.tensor_model_parallel_size=2 train.world_size=2 model.sequence_parallel=true $DROP model.attention_backend=unfused
build tp2dp2 model.tensor_model_parallel_size=2 train.world_size=4
# the artifact's plan.json is `stepc plan` of the recipe, per rank (not the shard divided by TP again)
"$stepc" plan models/tiny.lua model.bf16=false model.tensor_model_parallel_size=2 train.world_size=2 --json \
  >"$tmp/tp2.plan.json" 2>/dev/null || fail "stepc plan tp2"
python3 "$(dirname "$0")/plan_agrees.py" "$tmp/tp2.plan.json" "$tmp/tp2/plan.json" tp2 || fail "tp2's plan.json"
"$t" run "$tmp/one" 1 $STEPS "$tmp/one.safetensors" >"$tmp/one.txt" || { cat "$tmp/one.txt"; fail "one rank"; }
for r in one_drop one_drop_unfused one_bias g3one mlaone mlaone_nq mlaone_drop; do
  "$t" run "$tmp/$r" 1 $STEPS "$tmp/$r.safetensors" >"$tmp/$r.txt" || { cat "$tmp/$r.txt"; fail "one rank ($r)"; }
done
# dropout: each rank draws its slice of the one-rank mask (its heads' probabilities under TP, its
# sequence rows of the residual stream under SP), so the runs match the one-rank run with dropout
for a in tp2:2:one sp2:2:one tp2dp2:4:one tp2drop:2:one_drop sp2drop_unfused:2:one_drop_unfused tp2bias:2:one_bias sp2bias:2:one_bias g3tp2:2:g3one g3sp2:2:g3one mlatp2:2:mlaone mlatp2_nq:2:mlaone_nq mlasp2:2:mlaone mlatp2_drop:2:mlaone_drop mlasp2_drop:2:mlaone_drop; do
  ref=${a##*:} a=${a%:*}
  n=${a#*:} a=${a%:*}
  "$t" run "$tmp/$a" "$n" $STEPS "$tmp/$a.safetensors" >"$tmp/$a.txt" || { cat "$tmp/$a.txt"; fail "$a on $n ranks"; }
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$a" "$a" $STEPS 1e-5 5e-5 || fail "$a against one rank"
done
cmp -s "$tmp/one.txt" "$tmp/one_drop.txt" && fail "dropout 0.1 changed nothing in the one-rank run"
# stepc_eval under TP (vocab-parallel loss: each token's target logit summed over the group): loss and
# per-token log-probabilities of the one-rank parameters against one rank's
for a in tp2:one g3sp2:g3one; do
  "$t" evaleq "$tmp/${a#*:}" 1 "$tmp/${a%:*}" 2 "$tmp/${a#*:}.safetensors" || fail "${a%:*}'s evaluation"
done
# what stays refused at build: exit 4, the field and where the recipe sets it
refuse() {
  local what=$1 pat=$2; shift 2
  "$stepc" build models/tiny.lua "$@" -o "$tmp/refused" >"$tmp/r.log" 2>&1
  local rc=$?
  [ $rc -eq 4 ] || { cat "$tmp/r.log"; fail "$what: exit $rc, not 4"; }
  grep -q -- "$pat" "$tmp/r.log" || { cat "$tmp/r.log"; fail "$what: the message does not name $pat"; }
  echo "ok: refused: $what ($(grep -o -- "$pat[^,]*" "$tmp/r.log" | head -1))"
}
TP="model.tensor_model_parallel_size=2 train.world_size=2"
refuse "TP with ZeRO-1" "optimizer.use_distributed_optimizer=true" $TP optimizer.use_distributed_optimizer=true
refuse "TP 4 over 2 KV groups" "model.num_query_groups" model.tensor_model_parallel_size=4 train.world_size=4
refuse "TP with the chunked loss" "model.output_layer_chunks=4" $TP model.output_layer_chunks=4
refuse "pipeline parallelism" "model.pipeline_model_parallel_size=2" model.pipeline_model_parallel_size=2 train.world_size=2
refuse "context parallelism" "model.context_parallel_size=2" model.context_parallel_size=2 train.world_size=2
refuse "TP with tensor-parallel experts (ETP null = TP)" "expert_tensor_parallel_size" $TP model.sequence_parallel=true model.num_moe_experts=4 model.moe_router_topk=2
grep -q "models/tiny.lua\|override" "$tmp/r.log" || fail "the refusal names no place"
# TP on the cuda device: TP 2, with SP, with biases, each has a launch program (its collectives as
# records: an all-reduce, gather or scatter a record) that the player plays record for record on a
# recording device; the dropout slices (attention under TP, hidden under SP) as dropout_slice launches,
# GPT-3's learned positions under SP
# (bf16 weights: what the CUDA backend runs)
CU="model.bf16=true model.tensor_model_parallel_size=2 train.world_size=2"
build cu_tp2 $CU
build cu_sp2 $CU model.sequence_parallel=true
build cu_sp2bias $CU model.sequence_parallel=true model.add_bias_linear=true
build cu_tp2drop $CU $DROP model.attention_backend=unfused
build cu_sp2drop $CU $DROP model.attention_backend=unfused model.sequence_parallel=true
RECIPE=tests/recipes/gpt3_tiny.lua build cu_g3sp2 $CU model.sequence_parallel=true
for a in cu_tp2 cu_sp2 cu_sp2bias cu_tp2drop cu_sp2drop cu_g3sp2; do
  "$play" "$tmp/$a" >"$tmp/play_$a.txt" 2>&1 || { cat "$tmp/play_$a.txt"; fail "$a's launch program played"; }
  grep -c "COLL" "$tmp/$a/program.txt" | grep -qv '^0$' || fail "$a's program holds no collective"
  head -1 "$tmp/play_$a.txt"
done
grep -q "COLL all_gather bf16 tp" "$tmp/cu_sp2/program.txt" && grep -q "COLL reduce_scatter bf16 tp" "$tmp/cu_sp2/program.txt" ||
  fail "SP's program has no all-gather / reduce-scatter"
grep -q "LAUNCH dropout_slice" "$tmp/cu_sp2drop/program.txt" || fail "SP's dropout is not a sliced dropout launch"

# checkpoints: every rank writes its shard (shard.rank<N>.safetensors) beside the gathered
# model.safetensors; a run resumed at step 2 is the uninterrupted run bitwise (losses and every
# parameter byte), for TP 2 and TP 2 x DP 2; another layout is refused at load, naming both; the
# one-rank parameters load into TP 2 (each rank its shards) and gather back bitwise
for a in tp2:2 tp2dp2:4; do
  n=${a#*:} a=${a%:*}
  mkdir -p "$tmp/res_$a"
  "$t" resume "$tmp/$a" "$n" $STEPS 2 "$tmp/res_$a" >"$tmp/res_$a.txt" 2>&1 || { cat "$tmp/res_$a.txt"; fail "$a resumed"; }
  tail -1 "$tmp/res_$a.txt"
done
ls "$tmp/res_tp2/ckpt" | tr '\n' ' ' | grep -q "model.safetensors shard.rank0.safetensors shard.rank1.safetensors state.json" ||
  { ls "$tmp/res_tp2/ckpt"; fail "the TP 2 checkpoint's files"; }
mkdir -p "$tmp/reshard"
"$t" reshard "$tmp/tp2" 2 "$tmp/tp2dp2" 4 "$tmp/reshard" >"$tmp/reshard.txt" 2>&1 || { cat "$tmp/reshard.txt"; fail "TP 2 checkpoint at TP 2 x DP 2"; }
tail -1 "$tmp/reshard.txt"
mkdir -p "$tmp/tpload"
"$t" tpload "$tmp/tp2" 2 "$tmp/one.safetensors" "$tmp/tpload" >"$tmp/tpload.txt" 2>&1 || { cat "$tmp/tpload.txt"; fail "one-rank parameters into TP 2"; }
tail -1 "$tmp/tpload.txt"
echo "ok: tensor parallelism"
