#!/usr/bin/env bash
# forced.sh STEPC TEST_DP PROGRAM_PLAY — train.force_parallel_lowering (issue 25): the TP / SP / EP
# lowering at sizes 1, whose collectives run over groups of one rank, so one GPU runs a collective
# backend (NCCL included) through the code a multi-rank job plays. On the CPU device, one rank:
#   models/tiny.lua forced (TP ops, vocab-parallel embedding and loss), forced with SP, and
#   tests/recipes/tiny_mla_moe.lua forced with SP and expert-tensor parallelism 1 (EP_COUNTS /
#   EP_DISPATCH / EP_COMBINE over an EP group of one, the load-balancing loss over the TP group),
#   and so with the allgather dispatcher (the tokens, probabilities and indices gathered and the
#   outputs reduce-scattered over an EP group of one, the dispatch's local range all 8 experts)
# against the plain one-rank step, 4 steps: every loss and grad norm and every parameter, bitwise
# (tolerance 0): over groups of one every collective is a copy, no sum is split, and the CPU
# executor's vocab-parallel embedding and loss over one rank's whole vocabulary do the plain ops'
# arithmetic. (On CUDA the vocab-parallel loss is its own kernels: not bitwise the fused one there.)
# The bf16 builds' launch programs hold the collectives (all-gather / reduce-scatter / all-reduce
# records over TP and EP groups of one) and play record for record on a recording device.
# fp8 (current and delayed scaling) forced = the plain fp8 step, bitwise.
set -uo pipefail
stepc=$1 t=$2 play=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
STEPS=4
F="train.force_parallel_lowering=true"
F8="model.fp8=hybrid model.fp8_recipe=tensorwise"
MOE="model.expert_tensor_parallel_size=1"
build() {
  local name=$1 recipe=$2
  shift 2
  "$stepc" build "$recipe" "$@" -o "$tmp/$name" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "stepc build $name"; }
}
build one models/tiny.lua model.bf16=false
build forced models/tiny.lua model.bf16=false $F
build forced_sp models/tiny.lua model.bf16=false $F model.sequence_parallel=true
build moe_one tests/recipes/tiny_mla_moe.lua model.bf16=false
build moe_forced tests/recipes/tiny_mla_moe.lua model.bf16=false $F model.sequence_parallel=true $MOE
AG="model.moe_token_dispatcher_type=allgather"
build moe_forced_ag tests/recipes/tiny_mla_moe.lua model.bf16=false $F model.sequence_parallel=true $MOE $AG
for r in one moe_one; do
  "$t" run "$tmp/$r" 1 $STEPS "$tmp/$r.safetensors" >"$tmp/$r.txt" || { cat "$tmp/$r.txt"; fail "$r"; }
done
for a in forced:one forced_sp:one moe_forced:moe_one moe_forced_ag:moe_one; do
  ref=${a#*:} a=${a%:*}
  "$t" run "$tmp/$a" 1 $STEPS "$tmp/$a.safetensors" >"$tmp/$a.txt" || { cat "$tmp/$a.txt"; fail "$a"; }
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$a" "$a" $STEPS 0 0 || fail "$a against the plain step"
done
# the bf16 programs: collectives over groups of one, played on a recording device
build cu_forced_sp models/tiny.lua model.bf16=true $F model.sequence_parallel=true
build cu_moe_forced tests/recipes/tiny_mla_moe.lua model.bf16=true $F model.sequence_parallel=true $MOE
build cu_moe_forced_ag tests/recipes/tiny_mla_moe.lua model.bf16=true $F model.sequence_parallel=true $MOE $AG
for a in cu_forced_sp cu_moe_forced cu_moe_forced_ag; do
  "$play" "$tmp/$a" >"$tmp/play_$a.txt" 2>&1 || { cat "$tmp/play_$a.txt"; fail "$a's launch program played"; }
  head -1 "$tmp/play_$a.txt"
done
for c in "all_gather bf16 tp" "reduce_scatter bf16 tp" "allreduce_max f32 tp" "allreduce_sum f32 tp"; do
  grep -q "COLL $c" "$tmp/cu_forced_sp/program.txt" || fail "the forced TP + SP program holds no $c"
done
for c in "all_to_all f32 ep" "all_gather f32 ep" "allreduce_sum f32 ep"; do
  grep -q "COLL $c" "$tmp/cu_moe_forced/program.txt" || fail "the forced MoE program holds no $c"
done
for c in "all_gather f32 ep" "all_gather bf16 ep" "reduce_scatter bf16 ep" "allreduce_sum f32 ep"; do
  grep -q "COLL $c" "$tmp/cu_moe_forced_ag/program.txt" || fail "the forced allgather MoE program holds no $c"
done
# without the field: no collective
build cu_plain models/tiny.lua model.bf16=true
grep -q "^  COLL" "$tmp/cu_plain/program.txt" && fail "a plain one-rank program holds collectives"
# fp8 (current and delayed scaling) forced: bitwise the plain fp8 step (the delayed update's amax
# all-reduce over a TP group of one is a copy), and its bf16 program played
build f8one models/tiny.lua model.bf16=false $F8
build f8forced models/tiny.lua model.bf16=false $F8 $F model.sequence_parallel=true
build dlone tests/recipes/tiny_fp8_delayed.lua model.bf16=false
build dlforced tests/recipes/tiny_fp8_delayed.lua model.bf16=false $F model.sequence_parallel=true
for a in f8forced:f8one dlforced:dlone; do
  ref=${a#*:} a=${a%:*}
  for r in $ref $a; do
    "$t" run "$tmp/$r" 1 $STEPS "$tmp/$r.safetensors" >"$tmp/$r.txt" || { cat "$tmp/$r.txt"; fail "$r"; }
  done
  python3 "$(dirname "$0")/against_one.py" "$tmp/$ref" "$tmp/$a" "$a" $STEPS 0 0 || fail "$a against the plain step"
done
build cu_dlforced tests/recipes/tiny_fp8_delayed.lua $F model.sequence_parallel=true
"$play" "$tmp/cu_dlforced" >"$tmp/play_dl.txt" 2>&1 || { cat "$tmp/play_dl.txt"; fail "the forced delayed fp8 program played"; }
grep -A1 "^point .* fp8_scale_update" "$tmp/cu_dlforced/program.txt" | grep -q "COLL allreduce_max f32 amax" ||
  fail "the forced delayed fp8 program reduces no amax over TP"
echo "ok: forced lowering at sizes 1"
