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
# TP x ZeRO-1, PP, CP, EP (exit 4 naming the field and the recipe's line);
# TP on the cuda device: the launch programs played on a recording device. Checkpoints: a TP 2 and a TP 2 x DP 2 run resumed = the
# uninterrupted run bitwise; another layout refused at load; one-rank parameters loaded into TP 2.
#
# Fewer key/value groups than TP ranks ("replicated KV", docs/parallelism.md): each rank its H/TP query
# heads and the K and V rows of the one group they use, replicated on the TP/G ranks sharing it, their
# gradients summed over those ranks by the optimizer (one all-reduce over TP of a zero-padded buffer
# of every group's rows), counted once in the grad norm. Against one rank with the same groups: G 1 at
# TP 2, at TP 2 + SP with biases (the qkv bias replicated as its rows), at TP 4 + SP, at TP 4 + SP with
# attention and hidden dropout (unfused), at TP 2 x DP 2, and G 2 at TP 4; G 1 at TP 2 and G 2 at TP 4
# resumed bitwise, the shard file holding the rank's rows and model.safetensors the one-rank tensor;
# the one-rank parameters loaded into G 1 at TP 4 + SP; the bf16 programs of G 1 at TP 2 and at TP 4 +
# SP + biases played, each layer's pack / fp32 all-reduce / unpack in them. Groups that TP neither
# divides nor is a multiple of stay refused (the validator's STEPC-3, naming the field).
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
# ZeRO-1 under TP: each TP rank's data-parallel group shards that rank's tensors
build tp2dp2z model.tensor_model_parallel_size=2 train.world_size=4 optimizer.use_distributed_optimizer=true
build sp2dp2z model.tensor_model_parallel_size=2 train.world_size=4 optimizer.use_distributed_optimizer=true model.sequence_parallel=true
build sp2dp2 model.tensor_model_parallel_size=2 train.world_size=4 model.sequence_parallel=true
# fewer key/value groups than TP ranks (tiny's 4 heads over 1 or 2 groups)
G1=model.num_query_groups=1 TP2="model.tensor_model_parallel_size=2 train.world_size=2"
TP4="model.tensor_model_parallel_size=4 train.world_size=4 model.sequence_parallel=true"
build one1 $G1
build one1bias $G1 model.add_bias_linear=true
build one1drop $G1 $DROP model.attention_backend=unfused
build g1tp2 $G1 $TP2
build g1sp2bias $G1 $TP2 model.sequence_parallel=true model.add_bias_linear=true
build g2tp4 model.tensor_model_parallel_size=4 train.world_size=4
build g1sp4 $G1 $TP4
build g1sp4drop $G1 $TP4 $DROP model.attention_backend=unfused
build g1tp2dp2 $G1 model.tensor_model_parallel_size=2 train.world_size=4
# the artifact's plan.json is `stepc plan` of the recipe, per rank (not the shard divided by TP again)
"$stepc" plan models/tiny.lua model.bf16=false model.tensor_model_parallel_size=2 train.world_size=2 --json \
  >"$tmp/tp2.plan.json" 2>/dev/null || fail "stepc plan tp2"
python3 "$(dirname "$0")/plan_agrees.py" "$tmp/tp2.plan.json" "$tmp/tp2/plan.json" tp2 || fail "tp2's plan.json"
"$t" run "$tmp/one" 1 $STEPS "$tmp/one.safetensors" >"$tmp/one.txt" || { cat "$tmp/one.txt"; fail "one rank"; }
for r in one_drop one_drop_unfused one_bias g3one mlaone mlaone_nq mlaone_drop one1 one1bias one1drop; do
  "$t" run "$tmp/$r" 1 $STEPS "$tmp/$r.safetensors" >"$tmp/$r.txt" || { cat "$tmp/$r.txt"; fail "one rank ($r)"; }
done
# dropout: each rank draws its slice of the one-rank mask (its heads' probabilities under TP, its
# sequence rows of the residual stream under SP), so the runs match the one-rank run with dropout
for a in tp2:2:one sp2:2:one tp2dp2:4:one tp2drop:2:one_drop sp2drop_unfused:2:one_drop_unfused tp2bias:2:one_bias sp2bias:2:one_bias g3tp2:2:g3one g3sp2:2:g3one mlatp2:2:mlaone mlatp2_nq:2:mlaone_nq mlasp2:2:mlaone mlatp2_drop:2:mlaone_drop mlasp2_drop:2:mlaone_drop \
  g1tp2:2:one1 g1sp2bias:2:one1bias g2tp4:4:one g1sp4:4:one1 g1sp4drop:4:one1drop g1tp2dp2:4:one1; do
  ref=${a##*:} a=${a%:*}
  n=${a#*:} a=${a%:*}
  "$t" run "$tmp/$a" "$n" $STEPS "$tmp/$a.safetensors" >"$tmp/$a.txt" || { cat "$tmp/$a.txt"; fail "$a on $n ranks"; }
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$a" "$a" $STEPS 1e-5 5e-5 || fail "$a against one rank"
done
cmp -s "$tmp/one.txt" "$tmp/one_drop.txt" && fail "dropout 0.1 changed nothing in the one-rank run"
# ZeRO-1 under TP is the TP x DP step bitwise (every element reduced by the same additions; the norm's
# per-tensor sums shared exactly): losses, grad norms and every parameter
for a in tp2dp2z:tp2dp2 sp2dp2z:sp2dp2; do
  z=${a%:*} ref=${a#*:}
  [ -s "$tmp/$ref.safetensors" ] || "$t" run "$tmp/$ref" 4 $STEPS "$tmp/$ref.safetensors" >"$tmp/$ref.txt" || fail "$ref"
  "$t" run "$tmp/$z" 4 $STEPS "$tmp/$z.safetensors" >"$tmp/$z.txt" || { cat "$tmp/$z.txt"; fail "$z on 4 ranks"; }
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$z" "$z" $STEPS 0 0 || fail "$z against $ref (bitwise)"
  cmp -s "$tmp/$ref.safetensors" "$tmp/$z.safetensors" || fail "$z's gathered parameters differ from $ref's"
done
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
refuse "TP with the chunked loss" "model.output_layer_chunks=4" $TP model.output_layer_chunks=4
refuse "pipeline parallelism" "model.pipeline_model_parallel_size=2" model.pipeline_model_parallel_size=2 train.world_size=2
refuse "context parallelism" "model.context_parallel_size=2" model.context_parallel_size=2 train.world_size=2
refuse "TP with tensor-parallel experts (ETP null = TP)" "expert_tensor_parallel_size" $TP model.sequence_parallel=true model.num_moe_experts=4 model.moe_router_topk=2
grep -q "models/tiny.lua\|override" "$tmp/r.log" || fail "the refusal names no place"
# key/value groups that TP neither divides nor is a multiple of: the validator's STEPC-3
"$stepc" build models/tiny.lua model.num_attention_heads=12 model.kv_channels=32 model.num_query_groups=3 $TP \
  -o "$tmp/refused" >"$tmp/r.log" 2>&1 && fail "3 key/value groups at TP 2 built"
grep -q "STEPC-3.*model.num_query_groups" "$tmp/r.log" || { cat "$tmp/r.log"; fail "the STEPC-3 refusal names no field"; }
echo "ok: refused: 3 key/value groups at TP 2 ($(grep -o "STEPC-3[^:]*" "$tmp/r.log" | head -1))"
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
build cu_g1tp2 model.bf16=true $G1 $TP2
build cu_g1sp4bias model.bf16=true $G1 $TP4 model.add_bias_linear=true
for a in cu_tp2 cu_sp2 cu_sp2bias cu_tp2drop cu_sp2drop cu_g3sp2 cu_g1tp2 cu_g1sp4bias; do
  "$play" "$tmp/$a" >"$tmp/play_$a.txt" 2>&1 || { cat "$tmp/play_$a.txt"; fail "$a's launch program played"; }
  grep -c "COLL" "$tmp/$a/program.txt" | grep -qv '^0$' || fail "$a's program holds no collective"
  head -1 "$tmp/play_$a.txt"
done
grep -q "COLL all_gather bf16 tp" "$tmp/cu_sp2/program.txt" && grep -q "COLL reduce_scatter bf16 tp" "$tmp/cu_sp2/program.txt" ||
  fail "SP's program has no all-gather / reduce-scatter"
grep -q "LAUNCH dropout_slice" "$tmp/cu_sp2drop/program.txt" || fail "SP's dropout is not a sliced dropout launch"
# replicated K / V rows: a layer's weight (2 G D x C = 8192 values) and bias (2 G D = 64) gradients
# packed, all-reduced in fp32 over TP and unpacked
for a in cu_g1tp2:8192 cu_g1sp4bias:8192 cu_g1sp4bias:64; do
  n=$(grep -c "COLL allreduce_sum f32 tp .* count=${a#*:} " "$tmp/${a%:*}/program.txt")
  [ "$n" = 4 ] || fail "${a%:*}: $n all-reduces of ${a#*:} replicated-row gradients, not one a layer"
  [ "$(grep -c "LAUNCH tp_rep_rows" "$tmp/${a%:*}/program.txt")" -ge 8 ] || fail "${a%:*}: no pack / unpack launches"
done

# checkpoints: every rank writes its shard (shard.rank<N>.safetensors) beside the gathered
# model.safetensors; a run resumed at step 2 is the uninterrupted run bitwise (losses and every
# parameter byte), for TP 2 and TP 2 x DP 2; another layout is refused at load, naming both; the
# one-rank parameters load into TP 2 (each rank its shards) and gather back bitwise
for a in tp2:2 tp2dp2:4 g1tp2:2 g2tp4:4 tp2dp2z:4; do
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
# replicated K / V: the rank's shard file holds its rows, model.safetensors the one-rank tensor
python3 - "$tmp/res_g1tp2/ckpt" <<'EOF' || fail "the G 1 at TP 2 checkpoint's shapes"
import json, struct, sys
def shapes(p):
    b = open(p, "rb").read()
    return {k: v["shape"] for k, v in json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]]).items() if k != "__metadata__"}
k = "layers.0.self_attention.linear_qkv.weight"
# tiny: 4 heads of 32, hidden 128; one group: Q 128 rows + K 32 + V 32 = 192, a TP 2 rank's 64 + 32 + 32
full, shard = shapes(sys.argv[1] + "/model.safetensors")[k], shapes(sys.argv[1] + "/shard.rank1.safetensors")[k]
assert full == [192, 128] and shard == [128, 128], (full, shard)
print(f"ok: {k}: gathered {full}, rank 1's shard {shard}")
EOF
mkdir -p "$tmp/tpload_g1"
"$t" tpload "$tmp/g1sp4" 4 "$tmp/one1.safetensors" "$tmp/tpload_g1" >"$tmp/tpload_g1.txt" 2>&1 ||
  { cat "$tmp/tpload_g1.txt"; fail "one-rank parameters into G 1 at TP 4"; }
tail -1 "$tmp/tpload_g1.txt"
echo "ok: tensor parallelism"
