#!/usr/bin/env bash
# run_bench.sh — stepc beside PyTorch on one GPU, in the same call (shared/bench/README.md):
#   bench/run_bench.sh [TORCH_STEP=path/to/torch_step.py]
# stepc: gpt2_small_llama (shape S) and llama3_2_1b (shape M), eager and full_iteration, --json;
# (stderr and PyTorch's output go to bench.log: at most 8 files come back from the GPU machine)
# PyTorch: torch_step.py --model S|M --variants eager:none,compile:none. Logs and JSON to $OUT.
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
if [ -r "$TORCH_STEP" ] && [ -z "${NO_TORCH:-}" ]; then
  for shape in S M; do
    echo "== torch $shape"
    PYTHONUNBUFFERED=1 timeout 300 python3 "$TORCH_STEP" --model $shape --variants eager:none,compile:none --out "$DEST/torch.jsonl" \
      >>"$DEST/bench.log" 2>&1
    echo "exit $?"
  done
  cat "$DEST/torch.jsonl"
fi
