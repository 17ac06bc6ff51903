#!/usr/bin/env bash
# run_attention.sh — attention backends side by side on one GPU, in one call:
#   OUT=dir bench/run_attention.sh [ATTN_BENCH=path/to/attn_bench.py]
# 1. attention alone: stepc's cuDNN fused attention (tests/gpu/cudnn_attention.c --bench:
#    correctness against fp64, then the time at the S, M and L8 shapes, deterministic and not) and
#    stepc's flash kernels (gpu_kernels --bench-only), beside PyTorch's scaled_dot_product_attention
#    per backend (the anchor attn_bench.py, when given and torch imports);
# 2. whole steps: S, M and L8 (llama3_8b with 8 layers) with attention_backend=flash and =fused,
#    full_iteration graph, --json (step ms, TFLOP/s, max allocated beside the predicted peak).
# Logs to $OUT; summary.txt holds the lines to read.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEST=${OUT:-attn-out}
STEPS=${STEPS:-15}
ATTN_BENCH=${ATTN_BENCH:-}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
S="$DEST/summary.txt"
{ date -u +%FT%TZ; echo "commit ${STEPC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv,noheader; } >"$S" 2>&1
timeout 300 "$BUILD/tests/gpu/gpu_cudnn_attn" --bench >"$DEST/cudnn_attn.log" 2>&1
echo "gpu_cudnn_attn exit $?" >>"$S"
grep -E "^(FAIL|BENCH)|checks" "$DEST/cudnn_attn.log" >>"$S"
timeout 300 "$BUILD/tests/gpu/gpu_kernels" --bench-only >"$DEST/flash_attn.log" 2>&1
grep -E "^BENCH" "$DEST/flash_attn.log" | sed 's/^BENCH/BENCH flash/' >>"$S"
if [ -n "$ATTN_BENCH" ] && [ -r "$ATTN_BENCH" ] && python3 -c 'import torch' 2>/dev/null; then
  timeout 300 python3 "$ATTN_BENCH" "$DEST/torch_attn.jsonl" >"$DEST/torch_attn.log" 2>&1
  cat "$DEST/torch_attn.jsonl" >>"$S"
fi
run() { # NAME RECIPE ARGS...
  local name=$1 recipe=$2; shift 2
  timeout 300 "$BUILD/stepc" run "$recipe" --device cuda --steps "$STEPS" --json model.cuda_graph_impl=full_iteration \
    model.check_for_nan_in_loss_and_grad=false "$@" >"$DEST/$name.json" 2>"$DEST/$name.err"
  local rc=$?
  python3 - "$DEST/$name.json" "$name" "$rc" >>"$S" <<'PY'
import json, statistics, sys
try:
    r = json.load(open(sys.argv[1])); m = r["measure"]; st = r["steps"]
    ms = statistics.median(x["ms"] for x in st[len(st) // 2:])
    print(f"STEP {sys.argv[2]:<22} {ms:8.2f} ms  max allocated {m['max_allocated_bytes']/1e9:7.3f} GB"
          f"  predicted {m['predicted_peak_bytes']/1e9:7.3f} GB  loss {st[-1]['loss']:.4f}  graph {st[-1]['graph']}")
except Exception as e:
    print(f"STEP {sys.argv[2]:<22} exit {sys.argv[3]}: {e}")
PY
  [ $rc -eq 0 ] || tail -3 "$DEST/$name.err" >>"$S"
}
for be in flash fused; do
  run "S_$be" models/gpt2_small_llama.lua model.attention_backend=$be
  run "M_$be" models/bench_m.lua model.attention_backend=$be
  run "L8_$be" models/llama3_8b.lua model.num_layers=8 model.attention_backend=$be
done
run M_fused_nondet models/bench_m.lua model.attention_backend=fused model.deterministic_mode=false
cat "$S"
