#!/usr/bin/env bash
# run_bench.sh — stepc beside PyTorch on one GPU, in the same call (docs/benchmarks.md):
#   bench/run_bench.sh [TORCH_STEP=path/to/torch_step.py]
# stepc: gpt2_small_llama (shape S) and llama3_2_1b (shape M), eager and full_iteration, and M with
# mlp and full recompute, --json;
# (stderr and PyTorch's output go to bench.log: at most 8 files come back from the GPU machine)
# PyTorch: torch_step.py --model S|M --variants eager:none,compile:none (M also eager:mlp,eager:full).
# Logs and JSON to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEST=${OUT:-bench-out}
STEPS=${STEPS:-15}
TORCH_STEP=${TORCH_STEP:-../torch_step.py}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$DEST/bench_gpu.txt" 2>&1
for m in gpt2_small_llama:S llama3_2_1b:M; do
  recipe=${m%%:*}; shape=${m##*:}
  for mode in none full_iteration; do
    echo "== stepc $recipe $mode"
    timeout 240 "$BUILD/stepc" run "models/$recipe.lua" --device cuda --steps "$STEPS" --json model.cuda_graph_impl=$mode model.check_for_nan_in_loss_and_grad=false \
      >"$DEST/stepc_${shape}_${mode}.json" 2>>"$DEST/bench.log"
    echo "exit $?"; tail -c 700 "$DEST/stepc_${shape}_${mode}.json"; echo
  done
done
# M with recompute (eager): the planned arena shrinks as the plan predicts; torch_step.py's
# eager:mlp and eager:full are the matched PyTorch variants.
for rc in "mlp:model.recompute_granularity=selective model.recompute_modules=[mlp]" \
          "full:model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1"; do
  name=${rc%%:*}
  echo "== stepc llama3_2_1b recompute $name"
  # shellcheck disable=SC2086
  timeout 240 "$BUILD/stepc" run models/llama3_2_1b.lua --device cuda --steps "$STEPS" --json ${rc#*:} \
    >"$DEST/stepc_M_${name}.json" 2>>"$DEST/bench.log"
  echo "exit $?"; tail -c 700 "$DEST/stepc_M_${name}.json"; echo
done
if [ -r "$TORCH_STEP" ] && [ -z "${NO_TORCH:-}" ]; then
  for shape in S M; do
    echo "== torch $shape"
    variants=eager:none,compile:none
    [ $shape = M ] && variants=eager:none,eager:mlp,eager:full,compile:none
    PYTHONUNBUFFERED=1 timeout 300 python3 "$TORCH_STEP" --model $shape --variants $variants --out "$DEST/torch.jsonl" \
      >>"$DEST/bench.log" 2>&1
    echo "exit $?"
  done
  cat "$DEST/torch.jsonl"
fi
