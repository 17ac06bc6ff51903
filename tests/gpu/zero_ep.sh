#!/usr/bin/env bash
# zero_ep.sh — the distributed optimizer (ZeRO-1) on cuda with ranks sharing ONE GPU (the host-staged
# collectives, runtime/coll_host.h; STEPC_COLLECTIVES=host), under plain DP, expert parallelism and
# tensor x expert parallelism: each layout with optimizer.use_distributed_optimizer=true against the
# same layout without it, on the bits of every step's loss and grad norm (the parameters feed every
# later step, so a wrong shard, norm or all-gather shows in the losses after it):
#   stepc run ART      --device cuda --nproc N --steps S --json   (plain: all-reduce of each gradient)
#   stepc run ART_ZERO --device cuda --nproc N --steps S --json   (ZeRO-1: reduce-scatter of each bucket's
#       dense gradients over the data-parallel group and the experts' over the expert-data-parallel
#       group, the norm partials summed over those groups, the masked AdamW, the params all-gathered)
# Host-staged sums are in group order on both sides, so the two must agree bitwise (on the CPU device
# the same layouts are bitwise: tests/api/ep.sh; the plans themselves: tests/api/zero_play.c).
# Layouts: tiny DP 2; tiny_mla_moe (bf16) EP 2 (DP 2, expert-DP 1), EP 2 x expert-DP 2 on 4 ranks,
# EP 4 on 4 ranks (expert-DP 1), TP 2 + SP x EP 2 on 4 ranks (DP 2, expert-DP 2), and EP 2 x
# expert-DP 2 again captured whole (cuda_graph_impl=full_iteration: the copies and host-staged
# collectives replayed by the graph). NCCL is not tried here: it needs one GPU a rank (on a machine of
# 2 or 4 GPUs the same commands with STEPC_COLLECTIVES=nccl run it; NCCL's sums are its own order, so
# compare within tolerance there, not bitwise).
#
# Run from the repository root with this machine's build/ carried (the GPU machine has no Lua headers
# to build stepc): tests/gpu/zero_ep.sh. The artifacts are built there by build/stepc (NVRTC and cc).
# Logs and summary.txt go to $OUT (or gpu-logs). STEPS (default 6). Exit 0 all PASS, 1 a FAIL, 77 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
DEST=${OUT:-gpu-logs}
mkdir -p "$DEST"
STEPS=${STEPS:-6}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
fails=0
say() { echo "$*" | tee -a "$DEST/summary.txt"; }
: >"$DEST/summary.txt"
say "== $(date -u +%FT%TZ) $(hostname) commit ${STEPC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DEST/summary.txt" 2>&1
# stepc build links the archives and headers at the paths stepc was built with
home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build/CMakeCache.txt 2>/dev/null)
[ -n "$home" ] && [ ! -e "$home" ] && { mkdir -p "$(dirname "$home")" && ln -s "$root" "$home"; }
export STEPC_CACHE_DIR=/tmp/stepc-cache STEPC_COLLECTIVES=host
ART=/tmp/zero-ep-arts
rm -rf "$ART" && mkdir -p "$ART"
build() { # name recipe overrides...
  local name=$1 recipe=$2
  shift 2
  build/stepc build "$recipe" "$@" -o "$ART/$name" >"$DEST/build_$name.log" 2>&1 || { say "FAIL build $name: $(tail -2 "$DEST/build_$name.log")"; fails=1; }
}
losses() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("\n".join(x["loss"].hex()+" "+x["grad_norm"].hex() for x in d["steps"]))' "$1"; }
why() { # a failed run's cause: the ranks' own messages first (stepc run --nproc prefixes them), else its last lines
  local m
  m=$(grep -v 'stepc run --nproc' "$DEST/run_$1.err" | grep -m3 .)
  echo "${m:-$(tail -3 "$DEST/run_$1.err")}"
}
run() { # name nproc
  timeout 600 build/stepc run "$ART/$1" --device cuda --nproc "$2" --steps "$STEPS" --json >"$DEST/run_$1.json" 2>"$DEST/run_$1.err"
}
Z=optimizer.use_distributed_optimizer=true
M="tests/recipes/tiny_mla_moe.lua model.bf16=true"
TPE="model.tensor_model_parallel_size=2 model.sequence_parallel=true model.expert_tensor_parallel_size=1"
FI="model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false"
# name nproc recipe overrides... (each built plain and with ZeRO-1)
layout() {
  local name=$1 n=$2
  shift 2
  build "$name" "$@"
  build "${name}_z" "$@" $Z
  if ! run "$name" "$n"; then say "FAIL $name (plain, $n ranks): $(why "$name")"; fails=1; return; fi
  if ! run "${name}_z" "$n"; then say "FAIL ${name}_z (ZeRO-1, $n ranks): $(why "${name}_z")"; fails=1; return; fi
  if diff <(losses "$DEST/run_$name.json") <(losses "$DEST/run_${name}_z.json") >"$DEST/diff_$name.txt"; then
    say "PASS $name: ZeRO-1 = plain bitwise over $STEPS steps on $n ranks sharing the GPU (losses $(losses "$DEST/run_${name}_z.json" | head -1) ...)"
  else
    say "FAIL $name: ZeRO-1 differs from plain ($DEST/diff_$name.txt)"
    fails=1
  fi
}
layout tiny_dp2 2 models/tiny.lua train.world_size=2
layout ep2 2 $M model.expert_model_parallel_size=2 train.world_size=2
layout ep2dp2 4 $M model.expert_model_parallel_size=2 train.world_size=4 train.global_batch_size=8
layout ep4 4 $M model.expert_model_parallel_size=4 train.world_size=4 train.global_batch_size=8
layout tp2ep2 4 $M $TPE model.expert_model_parallel_size=2 train.world_size=4
layout ep2dp2_fi 4 $M model.expert_model_parallel_size=2 train.world_size=4 train.global_batch_size=8 $FI
say "== $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
