#!/usr/bin/env bash
# run_bench.sh — stepc beside PyTorch on one GPU, in the same call (docs/benchmarks.md):
#   OUT=dir SHAPES="S M L8" TORCH_STEP=path/to/torch_step.py bench/run_bench.sh
# For each shape: stepc's step (`stepc run RECIPE --device cuda --json`, full_iteration graph,
# the recipe's defaults: attention_backend=auto) and, when TORCH_STEP is given and torch imports,
# torch_step.py's eager and torch.compile variants of the same model; EXTRA="NAME:SHAPE:OVERRIDES;..."
# adds stepc variants (e.g. "M_mlp_act:M:model.recompute_granularity=selective model.recompute_modules=[mlp_act]").
# PEAK=1 measures the bf16 GEMM ceiling in the same call (torch_step.py --peak).
# Prints one table: step ms, TFLOP/s (torch_step.py's FLOP count, the same for both), max allocated
# (stepc: beside the plan's prediction), max reserved, and the ratio torch.compile ms / stepc ms.
# Logs and JSON to $OUT (summary.txt is the table).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEST=${OUT:-bench-out}
STEPS=${STEPS:-15}
SHAPES=${SHAPES:-S M L8}
TORCH_STEP=${TORCH_STEP:-}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
{ date -u +%FT%TZ; echo "commit ${STEPC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } \
  >"$DEST/bench_gpu.txt" 2>&1
recipe_of() {
  case $1 in
  S) echo "models/gpt2_small_llama.lua" ;;
  M) echo "models/bench_m.lua" ;;
  L8) echo "models/llama3_8b.lua model.num_layers=8" ;;
  esac
}
stepc_run() { # NAME SHAPE OVERRIDES...
  local name=$1 shape=$2; shift 2
  echo "== stepc $name" >>"$DEST/bench.log"
  # shellcheck disable=SC2046
  timeout 300 "$BUILD/stepc" run $(recipe_of "$shape") --device cuda --steps "$STEPS" --json \
    model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false "$@" \
    >"$DEST/stepc_$name.json" 2>>"$DEST/bench.log"
  echo "exit $?" >>"$DEST/bench.log"
}
have_torch=0
[ -n "$TORCH_STEP" ] && [ -r "$TORCH_STEP" ] && python3 -c 'import torch' 2>/dev/null && have_torch=1
[ $have_torch = 1 ] && [ -n "${PEAK:-}" ] && python3 "$TORCH_STEP" --peak --variants "" --out "$DEST/torch.jsonl" >>"$DEST/bench.log" 2>&1
for shape in $SHAPES; do
  stepc_run "$shape" "$shape"
  if [ $have_torch = 1 ]; then
    PYTHONUNBUFFERED=1 timeout 420 python3 "$TORCH_STEP" --model "$shape" --variants eager:none,compile:none \
      --out "$DEST/torch.jsonl" >>"$DEST/bench.log" 2>&1
    echo "torch $shape exit $?" >>"$DEST/bench.log"
  fi
done
IFS=';' read -ra extras <<<"${EXTRA:-}"
for e in "${extras[@]}"; do
  [ -n "$e" ] || continue
  name=${e%%:*}; rest=${e#*:}; shape=${rest%%:*}; ov=${rest#*:}
  # shellcheck disable=SC2086
  stepc_run "$name" "$shape" $ov
done
python3 - "$DEST" >"$DEST/summary.txt" <<'PY'
import glob, json, os, statistics, sys
d = sys.argv[1]
torch = {}
peak = None
if os.path.exists(os.path.join(d, "torch.jsonl")):
    for line in open(os.path.join(d, "torch.jsonl")):
        try: r = json.loads(line)
        except Exception: continue
        if r.get("kind") == "peak": peak = r; continue
        torch[(r.get("model"), r.get("variant"))] = r
print(f"{'run':<16} {'ms':>9} {'TFLOP/s':>8} {'max alloc GB':>13} {'predicted':>10} {'reserved':>9} {'vs compile':>10} {'vs eager':>9}")
for f in sorted(glob.glob(os.path.join(d, "stepc_*.json"))):
    name = os.path.basename(f)[6:-5]
    shape = name.split("_")[0]
    try:
        r = json.load(open(f)); m = r["measure"]; st = r["steps"]
        ms = statistics.median(x["ms"] for x in st[len(st) // 2:])
    except Exception as e:
        print(f"{name:<16} failed: {e}"); continue
    tc, te = torch.get((shape, "compile:none")), torch.get((shape, "eager:none"))
    tfl = tc["tflops"] * tc["step_ms"] / ms if tc and tc.get("ok") else 0
    rc = f"{tc['step_ms'] / ms:.3f}x" if tc and tc.get("ok") else "-"
    re_ = f"{te['step_ms'] / ms:.3f}x" if te and te.get("ok") else "-"
    print(f"stepc {name:<10} {ms:9.2f} {tfl:8.1f} {m['max_allocated_bytes']/1e9:13.3f} {m['predicted_peak_bytes']/1e9:10.3f} {'':>9} {rc:>10} {re_:>9}")
for (shape, var), r in sorted(torch.items()):
    if r.get("ok"):
        print(f"torch {shape} {var:<12} {r['step_ms']:7.2f} {r['tflops']:8.1f} {r['max_alloc_gb']:13.3f} {'':>10} {r['max_reserved_gb']:9.3f}")
    else:
        print(f"torch {shape} {var:<12} {r.get('error')}")
if peak: print("ceilings:", {k: v for k, v in peak.items() if k != "kind"})
PY
cat "$DEST/summary.txt"
