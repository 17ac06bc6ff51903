#!/usr/bin/env bash
# api.zero_cuda STEPC ZERO_PLAY — the distributed optimizer (ZeRO-1) on cuda without a GPU: artifacts of
# ZeRO-1 under DP, EP, EP x expert-DP and TP x EP built, and every rank's collectives (runtime/zero_coll.h,
# what runtime/api_cuda_dp.c plays through NCCL or the host-staged communicator) simulated by
# tests/api/zero_play.c against the image's owners and the memory plan's shards: the groups' members
# issue the same collectives, each owned gradient ends as its group's sum / DP in member order (the
# CPU device's bits), the norm slices as their owners', the params as their owners' bytes; and every
# rank's initialisation as the player plays it (runtime/program.h lp_init_rec: a master another rank
# holds is not written): no write on another tensor of the optimizer-state region this rank holds,
# each master it holds written once by its own param's launch, none it does not hold written. Each
# layout's initialisation played unmasked (every master on every rank: the program before the fix,
# which left every multi-rank layout's loss not finite at step 2 on the H200) must fail that check.
set -uo pipefail
stepc=$1 play=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
Z=optimizer.use_distributed_optimizer=true
G8="train.global_batch_size=8"
TPE="model.tensor_model_parallel_size=2 model.sequence_parallel=true model.expert_tensor_parallel_size=1"
M="tests/recipes/tiny_mla_moe.lua model.bf16=true" # cuda runs bf16 recipes
run() { # name world recipe overrides...
  local name=$1 world=$2 recipe=$3
  shift 3
  "$stepc" build "$recipe" "$@" $Z -o "$tmp/$name" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "stepc build $name"; }
  "$play" "$tmp/$name" "$world" >"$tmp/$name.play" 2>&1 || { cat "$tmp/$name.play"; fail "zero_play $name"; }
  tail -1 "$tmp/$name.play"
  if "$play" "$tmp/$name" "$world" unmasked >"$tmp/$name.unmasked" 2>&1; then
    cat "$tmp/$name.unmasked"
    fail "zero_play $name unmasked: the initialisation without the held masters passes the check"
  fi
  grep -q "the initialisation unmasked fails the check" "$tmp/$name.unmasked" || { cat "$tmp/$name.unmasked"; fail "zero_play $name unmasked"; }
  echo "  unmasked: $(grep -c '^FAIL' "$tmp/$name.unmasked") init failures (the program before the fix)"
}
run tiny_dp2 2 models/tiny.lua train.world_size=2
run tiny_dp4 4 models/tiny.lua train.world_size=4 train.global_batch_size=16
run gpt3_dp4 4 tests/recipes/gpt3_tiny.lua model.bf16=true train.world_size=4 train.global_batch_size=16
run ep2 2 $M model.expert_model_parallel_size=2 train.world_size=2
run ep2dp2 4 $M model.expert_model_parallel_size=2 train.world_size=4 $G8
run ep4 4 $M model.expert_model_parallel_size=4 train.world_size=4 $G8
run tp2ep2 4 $M $TPE model.expert_model_parallel_size=2 train.world_size=4
# fp8 primary weights (model.fp8_param): the owner's fp8 bytes gathered, the fp32 masters never sent
run f8p_dp2 2 tests/recipes/tiny_fp8.lua model.fp8_param=true train.world_size=2 $G8
run dlp_dp2 2 tests/recipes/tiny_fp8_delayed.lua model.fp8_param=true train.world_size=2 $G8
run tp4ep2 8 $M ${TPE/tensor_model_parallel_size=2/tensor_model_parallel_size=4} model.expert_model_parallel_size=2 train.world_size=8 $G8
# the rank lines of one layout, for the log
cat "$tmp/tp2ep2.play"
grep "init:" "$tmp/tp2ep2.unmasked"
echo "api.zero_cuda: ok"
