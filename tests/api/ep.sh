#!/usr/bin/env bash
# ep.sh STEPC TEST_DP — expert parallelism on the CPU device (issue 25): tests/recipes/tiny_mla_moe.lua
# (MLA, a dense first layer, then MoE layers of 8 experts top-2 with a shared expert and the
# load-balancing loss, fp32), 4 steps each of
#   EP 2 (2 ranks, 4 experts each), dropless and with capacity factor 1.0 (tokens dropped by
#   position), and with padding to capacity; EP 4 (4 ranks, 2 experts each), dropless and with
#   capacity 1.0; EP 2 x 2 expert-data-
#   parallel ranks (4 ranks: experts 0-3 on ranks 0 and 2, 4-7 on ranks 1 and 3)
# against the one-rank step over the same global batch (each EP rank is a data-parallel rank with
# its own micro-batches): every step's loss and grad norm, and every parameter after the steps (the
# experts gathered into the one-rank layout by stepc_save_params); the ranks of a run agree
# bitwise on loss and grad norm; tests/recipes/tiny_hybrid.lua (Mamba-2, attention, MLP, MoE) at
# EP 2 likewise, and at TP 2 + SP alone and times EP 2 (Mamba under TP). Megatron's allgather
# dispatcher (its default; dropless, TP 1): tiny_mla_moe at EP 2, EP 4 and EP 2 x expert-DP 2, and
# tiny_hybrid at EP 2, against the same one-rank steps within the same tolerances; an allgather
# EP 2 run resumed bitwise. MoE under TP 2 + SP (expert-tensor parallelism 1), alone, times
# EP 2, EP 2 x DP 2 and EP 4 (and on 8 ranks TP 2 x EP 2 x DP 4, TP 4 x EP 2 x DP 2), within the TP
# tolerances (MoE under TP without SP is the validator's MCORE-68); with ZeRO-1 too (the dense state
# over the data-parallel group, the experts' over the expert-data-parallel one): the same layouts
# without it bitwise, each rank holding the shard the build plans, resumed bitwise. Then what stays refused: MoE under TP with tensor-parallel experts or a capacity; EP with
# the flex dispatcher, with the allgather dispatcher and a capacity or under TP (exit 4
# naming the field and the recipe's place); on the cuda device (bf16) EP 2 and EP 2 with capacity
# (alltoall: the counts all-gathered, the rows exchanged by all-to-all) and EP 2 allgather (the
# tokens, probabilities and indices all-gathered, the outputs reduce-scattered over the EP group)
# have launch programs that the player plays record for record on a recording device. Checkpoints: an EP 2 and an EP 2 x expert-DP 2 run resumed = the uninterrupted
# run bitwise; one-rank parameters loaded into EP 2.
#
# Why not bitwise: the token exchange only copies rows (exact), and each routed row's expert GEMMs
# are the same dot products as on one rank; but an expert's weight gradient sums, in one GEMM, the
# rows that every EP rank routed to it, where one rank sums each micro-batch's rows in its own GEMM
# and adds the micro-batches (other fp32 rounding, ~1e-7 relative); the expert gradients are then
# averaged over their expert-data-parallel group, and the grad norm adds the experts' squares in
# another order. Adam divides each element by its own RMS, so a near-zero gradient element moves by
# up to lr a step whatever the rounding (see docs/parallelism.md): parameters within 5e-6 absolute
# (measured largest 5.9e-7, in an expert's linear_fc1) where 4 steps move them by up to ~6e-3 and a
# misplaced expert differs by the init scale (0.02). Tolerances: loss and grad norm 1e-6 relative
# (measured 1.0e-7), parameters 5e-6 absolute. The allgather dispatcher adds one more order: a
# token's output is the sum over its k experts; one rank adds them in the unpermute, the EP ranks
# each add their local experts' and the reduce-scatter adds the ranks' parts in rank order (measured
# losses within 1.0e-7 at EP 2, 2.1e-8 at EP 4; parameters 6.3e-7 at EP 2, 2.0e-6 at EP 4).
set -uo pipefail
stepc=$1 t=$2 play=$3
tmp=${EP_KEEP:-$(mktemp -d)}
trap '[ -n "${EP_KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
STEPS=4
R=tests/recipes/tiny_mla_moe.lua
build() { "$stepc" build $R "${@:2}" -o "$tmp/$1" >"$tmp/$1.log" 2>&1 || { cat "$tmp/$1.log"; fail "stepc build $1"; }; }
CAP="model.moe_expert_capacity_factor=1.0"
PAD="$CAP model.moe_pad_expert_input_to_capacity=true"
G8="train.global_batch_size=8"
EP2="model.expert_model_parallel_size=2 train.world_size=2"
build one
build one_cap $CAP
build one_pad $PAD
build one8 $G8
build ep2 $EP2
build ep2cap $EP2 $CAP
build ep2pad $EP2 $PAD
build ep4 model.expert_model_parallel_size=4 train.world_size=4 $G8
build one8_cap $G8 $CAP
build ep4cap model.expert_model_parallel_size=4 train.world_size=4 $G8 $CAP
build ep2dp2 model.expert_model_parallel_size=2 train.world_size=4 $G8
# ZeRO-1 under EP: the dense state sharded over the data-parallel ranks, the experts' over the
# expert-data-parallel ones (the ranks holding the same experts)
Z=optimizer.use_distributed_optimizer=true
build ep2z $EP2 $Z
build ep2dp2z model.expert_model_parallel_size=2 train.world_size=4 $G8 $Z
build ep4z model.expert_model_parallel_size=4 train.world_size=4 $G8 $Z
# Megatron's allgather dispatcher (its default): every rank's tokens gathered over the EP group,
# each rank running its experts over the gathered tokens, the outputs reduce-scattered back
AG="model.moe_token_dispatcher_type=allgather"
build ag2 $EP2 $AG
build ag4 model.expert_model_parallel_size=4 train.world_size=4 $G8 $AG
build ag2dp2 model.expert_model_parallel_size=2 train.world_size=4 $G8 $AG
# MoE under tensor parallelism (with SP, expert-tensor parallelism 1: Moonlight's layout at test size):
# TP 2, TP 2 x EP 2, TP 2 x EP 2 x DP 2, TP 2 x EP 4 — each rank routes its sequence rows, the EP
# group is EP consecutive ranks of the TP x DP job, the shared experts tensor-parallel, the aux loss
# over the TP group's tokens
TPE="model.tensor_model_parallel_size=2 model.sequence_parallel=true model.expert_tensor_parallel_size=1"
build tp2moe $TPE train.world_size=2
build tp2ep2 $TPE model.expert_model_parallel_size=2 train.world_size=2
build tp2ep2dp2 $TPE model.expert_model_parallel_size=2 train.world_size=4
build tp2ep4 $TPE model.expert_model_parallel_size=4 train.world_size=4
# ZeRO-1 under TP and EP together (Moonlight's layout): the dense state sharded over each TP rank's
# data-parallel group (W / TP ranks), the experts' over the expert-data-parallel group (W / EP ranks,
# stride EP): TP 2 x EP 2 on 4 ranks (DP 2, expert-DP 2), TP 2 x EP 4 on 4 (DP 2, expert-DP 1),
# TP 2 x EP 2 on 8 (DP 4, expert-DP 4) and TP 4 x EP 2 on 8 (DP 2, expert-DP 4: one data-parallel
# rank's TP ranks in two expert-data-parallel groups), each against the same layout without it
TP4E="model.tensor_model_parallel_size=4 model.sequence_parallel=true model.expert_tensor_parallel_size=1"
build tp2ep2dp2z $TPE model.expert_model_parallel_size=2 train.world_size=4 $Z
build tp2ep4z $TPE model.expert_model_parallel_size=4 train.world_size=4 $Z
build tp2ep2dp4 $TPE model.expert_model_parallel_size=2 train.world_size=8 $G8
build tp2ep2dp4z $TPE model.expert_model_parallel_size=2 train.world_size=8 $G8 $Z
build tp4ep2dp2 $TP4E model.expert_model_parallel_size=2 train.world_size=8 $G8
build tp4ep2dp2z $TP4E model.expert_model_parallel_size=2 train.world_size=8 $G8 $Z
# a hybrid Mamba / attention / MoE stack (Nemotron 3 Nano's layout: EP inside the data-parallel ranks)
HY="model.bf16=false model.moe_token_dispatcher_type=alltoall"
R=tests/recipes/tiny_hybrid.lua build hyone $HY
R=tests/recipes/tiny_hybrid.lua build hyep2 $HY $EP2
R=tests/recipes/tiny_hybrid.lua build hyag2 model.bf16=false $AG $EP2
# ... and under TP 2 + SP (the Mamba mixer's heads and groups split: in_proj column-parallel in five
# segments, out_proj row-parallel), alone and times EP 2
R=tests/recipes/tiny_hybrid.lua build hytp2 $HY $TPE train.world_size=2
R=tests/recipes/tiny_hybrid.lua build hytp2ep2 $HY $TPE model.expert_model_parallel_size=2 train.world_size=2
# the artifact's plan.json is `stepc plan` of the recipe, per rank (not the shard divided by EP again)
"$stepc" plan $R $EP2 --json >"$tmp/ep2.plan.json" 2>/dev/null || fail "stepc plan ep2"
python3 "$(dirname "$0")/plan_agrees.py" "$tmp/ep2.plan.json" "$tmp/ep2/plan.json" ep2 || fail "ep2's plan.json"
for r in one one_cap one_pad one8 one8_cap hyone; do
  "$t" run "$tmp/$r" 1 $STEPS "$tmp/$r.safetensors" >"$tmp/$r.txt" || { cat "$tmp/$r.txt"; fail "one rank ($r)"; }
done
for a in ep2:2:one ep2cap:2:one_cap ep2pad:2:one_pad ep4:4:one8 ep4cap:4:one8_cap ep2dp2:4:one8 hyep2:2:hyone \
  ag2:2:one ag4:4:one8 ag2dp2:4:one8 hyag2:2:hyone; do
  ref=${a##*:} a=${a%:*}
  n=${a#*:} a=${a%:*}
  "$t" run "$tmp/$a" "$n" $STEPS "$tmp/$a.safetensors" >"$tmp/$a.txt" || { cat "$tmp/$a.txt"; fail "$a on $n ranks"; }
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$a" "$a" $STEPS 1e-6 5e-6 || fail "$a against one rank"
done
# ZeRO-1 under EP is the EP step bitwise: every element reduced by the same additions in the same
# order (the experts' over their expert-data-parallel group, divided by the data-parallel size), the
# norm's per-tensor sums shared exactly; losses, grad norms and every gathered parameter byte
for a in ep2z:ep2:2 ep2dp2z:ep2dp2:4 ep4z:ep4:4; do
  z=${a%%:*} rest=${a#*:} ref=${rest%:*} n=${rest#*:}
  "$t" run "$tmp/$z" "$n" $STEPS "$tmp/$z.safetensors" >"$tmp/$z.txt" || { cat "$tmp/$z.txt"; fail "$z on $n ranks"; }
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$z" "$z" $STEPS 0 0 || fail "$z against $ref (bitwise)"
  cmp -s "$tmp/$ref.safetensors" "$tmp/$z.safetensors" || fail "$z's gathered parameters differ from $ref's"
done
# under TP a row-parallel linear's and the vocab-parallel loss's partial sums round differently from
# one rank's single products: the TP tolerances (tests/api/tp.sh)
for a in tp2moe:2:one tp2ep2:2:one tp2ep2dp2:4:one tp2ep4:4:one hytp2:2:hyone hytp2ep2:2:hyone \
  tp2ep2dp4:8:one8 tp4ep2dp2:8:one8 tp2ep2dp2z:4:one tp2ep4z:4:one tp2ep2dp4z:8:one8 tp4ep2dp2z:8:one8; do
  ref=${a##*:} a=${a%:*}
  n=${a#*:} a=${a%:*}
  "$t" run "$tmp/$a" "$n" $STEPS "$tmp/$a.safetensors" >"$tmp/$a.txt" || { cat "$tmp/$a.txt"; fail "$a on $n ranks"; }
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$a" "$a" $STEPS 1e-5 5e-5 || fail "$a against one rank"
done
# ZeRO-1 under TP and EP is the TP x EP step bitwise (ZeRO only moves where each AdamW update runs: the
# same reductions in the same order, the norm's per-tensor sums shared exactly, the replicated ones
# counted once as without it): losses, grad norms and every gathered parameter byte
for a in tp2ep2dp2z:tp2ep2dp2 tp2ep4z:tp2ep4 tp2ep2dp4z:tp2ep2dp4 tp4ep2dp2z:tp4ep2dp2; do
  z=${a%%:*} ref=${a#*:}
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$z" "$z" $STEPS 0 0 || fail "$z against $ref (bitwise)"
  cmp -s "$tmp/$ref.safetensors" "$tmp/$z.safetensors" || fail "$z's gathered parameters differ from $ref's"
done
# ... and each rank holds its shard of the masters and moments: the region every rank allocates and
# what each job rank holds (stepc_measure) are the rank's step's plan, which the build reports
for a in tp2ep2dp2z:4 tp4ep2dp2z:8; do
  n=${a#*:} a=${a%:*}
  "$t" measure "$tmp/$a" "$n" "$tmp/$a.m.safetensors" >"$tmp/$a.measure" || { cat "$tmp/$a.measure"; fail "measure $a"; }
  python3 "$(dirname "$0")/region_agrees.py" "$tmp/$a.log" "$tmp/$a.measure" "$a" || fail "$a's per-rank optimizer state"
done
# the capacity runs dropped tokens (else they test nothing beyond dropless)
cmp -s "$tmp/one.txt" "$tmp/one_cap.txt" && fail "capacity factor 1.0 changed nothing: no token was dropped"
# what stays refused at build: exit 4, the field and where the recipe sets it
refuse() {
  local what=$1 pat=$2; shift 2
  "$stepc" build $R "$@" -o "$tmp/refused" >"$tmp/r.log" 2>&1
  local rc=$?
  [ $rc -eq 4 ] || { cat "$tmp/r.log"; fail "$what: exit $rc, not 4"; }
  grep -q -- "$pat" "$tmp/r.log" || { cat "$tmp/r.log"; fail "$what: the message does not name $pat"; }
  echo "ok: refused: $what ($(grep -o -- "$pat[^,]*" "$tmp/r.log" | head -1))"
}
refuse "MoE under TP with tensor-parallel experts (ETP null = TP)" "model.tensor_model_parallel_size=2" model.tensor_model_parallel_size=2 model.sequence_parallel=true train.world_size=2
refuse "MoE under TP with a capacity" "model.moe_expert_capacity_factor=1.0" $TPE train.world_size=2 $CAP
refuse "EP with the flex dispatcher" "model.moe_token_dispatcher_type=flex" $EP2 model.moe_token_dispatcher_type=flex
refuse "EP allgather with a capacity" "model.moe_expert_capacity_factor=1" $EP2 $AG $CAP
refuse "EP allgather under TP" "model.tensor_model_parallel_size=2" $TPE $AG model.expert_model_parallel_size=2 train.world_size=2
refuse "expert tensor parallelism" "model.expert_tensor_parallel_size=2" $EP2 model.expert_tensor_parallel_size=2 train.world_size=4 $G8
grep -q "tiny_mla_moe.lua\|override" "$tmp/r.log" || fail "the refusal names no place"
# EP on the cuda device (bf16): the launch programs (the counts all-gathered, the rows exchanged by
# all-to-all records), played on a recording device
build cu_ep2 model.bf16=true model.expert_model_parallel_size=2 train.world_size=2
build cu_ep2cap model.bf16=true model.expert_model_parallel_size=2 train.world_size=2 $CAP
R=tests/recipes/tiny_hybrid.lua build cu_hytp2ep2 model.bf16=true model.moe_token_dispatcher_type=alltoall $TPE model.expert_model_parallel_size=2 train.world_size=2
build cu_ag2 model.bf16=true $EP2 $AG
"$play" "$tmp/cu_ag2" >"$tmp/play_cu_ag2.txt" 2>&1 || { cat "$tmp/play_cu_ag2.txt"; fail "cu_ag2's launch program played"; }
for c in "all_gather bf16 ep" "all_gather f32 ep" "reduce_scatter bf16 ep"; do # tokens and probs, indices, outputs
  grep -q "COLL $c" "$tmp/cu_ag2/program.txt" || fail "cu_ag2's program holds no $c"
done
grep -q "COLL all_to_all" "$tmp/cu_ag2/program.txt" && fail "cu_ag2's program holds an all-to-all (the allgather dispatcher gathers)"
grep -q "allgather dispatcher" "$tmp/cu_ag2.log" || fail "cu_ag2's build names no allgather buffers"
head -1 "$tmp/play_cu_ag2.txt"
for a in cu_ep2 cu_ep2cap cu_hytp2ep2; do
  "$play" "$tmp/$a" >"$tmp/play_$a.txt" 2>&1 || { cat "$tmp/play_$a.txt"; fail "$a's launch program played"; }
  grep -q "COLL all_gather f32 ep" "$tmp/$a/program.txt" || fail "$a's program holds no EP all-gather of the counts"
  grep -q "COLL all_to_all [a-z0-9]* ep" "$tmp/$a/program.txt" || fail "$a's program holds no EP all-to-all"
  grep -q "COLL all_gather bf16 ep" "$tmp/$a/program.txt" && fail "$a's program gathers rows (the all-to-all moves them)"
  head -1 "$tmp/play_$a.txt"
done
# checkpoints: every rank writes its shard beside the gathered model.safetensors; a run resumed at
# step 2 is the uninterrupted run bitwise, for EP 2 and EP 2 x expert-DP 2; the one-rank parameters
# load into EP 2 (each rank its experts) and gather back bitwise
for a in ep2:2 ep2dp2:4 tp2ep2:2 ag2:2 ep2dp2z:4 tp2ep2dp2z:4 tp4ep2dp2z:8; do
  n=${a#*:} a=${a%:*}
  mkdir -p "$tmp/res_$a"
  "$t" resume "$tmp/$a" "$n" $STEPS 2 "$tmp/res_$a" >"$tmp/res_$a.txt" 2>&1 || { cat "$tmp/res_$a.txt"; fail "$a resumed"; }
  tail -1 "$tmp/res_$a.txt"
done
mkdir -p "$tmp/tpload"
"$t" tpload "$tmp/ep2" 2 "$tmp/one.safetensors" "$tmp/tpload" >"$tmp/tpload.txt" 2>&1 || { cat "$tmp/tpload.txt"; fail "one-rank parameters into EP 2"; }
tail -1 "$tmp/tpload.txt"
echo "ok: expert parallelism"
