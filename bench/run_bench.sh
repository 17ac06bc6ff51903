#!/usr/bin/env bash
# run_bench.sh — stepc beside PyTorch on one GPU, in the same call (docs/benchmarks.md):
#   OUT=dir SHAPES="S M Mb8 L8 MoE7" TORCH_STEP=path/to/torch_step.py TORCH_MOE=path/to/torch_moe.py \
#     bench/run_bench.sh
# The shapes of docs/benchmarks.md: S, M, Mb8 (M at micro-batch 8), L8, MoE7 (models/moonlight_mha_7l.lua).
# For each shape: stepc's step (`stepc run RECIPE --device cuda --json`, full_iteration graph,
# the recipe's defaults: attention_backend=auto) and its PyTorch anchor's eager and torch.compile
# variants of the same model when torch imports: torch_step.py --model SHAPE (S, M, Mb8, L8; path in
# TORCH_STEP), torch_moe.py --layers 7 (MoE7; path in TORCH_MOE). EXTRA="NAME:SHAPE:OVERRIDES;..."
# adds stepc variants (e.g. "M_mlp_act:M:model.recompute_granularity=selective model.recompute_modules=[mlp_act]").
# TUNE=N adds --gemm-tuning N to every stepc run (cuBLASLt's first N algorithms timed per GEMM shape
# at open, the fastest kept: docs/gpu-runtime.md, "GEMM algorithms").
# PEAK=1 measures the bf16 GEMM ceiling in the same call (torch_step.py --peak).
# Prints one table: step ms, TFLOP/s (torch_step.py's FLOP count, the same for both), max allocated
# (stepc: beside the plan's prediction), max reserved, and the ratio torch.compile ms / stepc ms
# (torch_moe.py counts no FLOPs: MoE7's TFLOP/s is "-"). Logs and JSON to $OUT (summary.txt is the
# table). DRY=1 prints the commands it would run, one a line, and runs none.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEST=${OUT:-bench-out}
STEPS=${STEPS:-15}
TUNE_ARGS=()
[ -z "${TUNE:-}" ] || TUNE_ARGS=(--gemm-tuning "$TUNE")
SHAPES=${SHAPES:-S M Mb8 L8 MoE7}
TORCH_STEP=${TORCH_STEP:-}
TORCH_MOE=${TORCH_MOE:-}
DRY=${DRY:-}
[ -n "$DRY" ] || mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
[ -n "$DRY" ] || { date -u +%FT%TZ; echo "commit ${STEPC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } \
  >"$DEST/bench_gpu.txt" 2>&1
recipe_of() {
  case $1 in
  S) echo "models/gpt2_small_llama.lua" ;;
  M) echo "models/bench_m.lua" ;;
  Mb8) echo "models/bench_m.lua train.micro_batch_size=8 train.global_batch_size=8" ;;
  L8) echo "models/llama3_8b.lua model.num_layers=8" ;;
  MoE7) echo "models/moonlight_mha_7l.lua" ;;
  *) return 1 ;;
  esac
}
torch_cmd() { # SHAPE: the anchor's command line, or nothing when this shape has no anchor here
  case $1 in
  MoE7) [ -n "$TORCH_MOE" ] && echo "python3 $TORCH_MOE --layers 7" ;;
  *) [ -n "$TORCH_STEP" ] && echo "python3 $TORCH_STEP --model $1" ;;
  esac
}
for shape in $SHAPES; do
  recipe_of "$shape" >/dev/null || { echo "run_bench.sh: unknown shape $shape (S M Mb8 L8 MoE7)" >&2; exit 2; }
done
stepc_run() { # NAME SHAPE OVERRIDES...
  local name=$1 shape=$2; shift 2
  if [ -n "$DRY" ]; then
    echo "$BUILD/stepc run $(recipe_of "$shape") --device cuda --steps $STEPS --json ${TUNE_ARGS[*]} model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false $* > $DEST/stepc_$name.json"
    return
  fi
  echo "== stepc $name" >>"$DEST/bench.log"
  # shellcheck disable=SC2046
  timeout 300 "$BUILD/stepc" run $(recipe_of "$shape") --device cuda --steps "$STEPS" --json "${TUNE_ARGS[@]}" \
    model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false "$@" \
    >"$DEST/stepc_$name.json" 2>>"$DEST/bench.log"
  echo "exit $?" >>"$DEST/bench.log"
}
have_torch=0
if [ -n "$DRY" ]; then
  have_torch=1
else
  for f in "$TORCH_STEP" "$TORCH_MOE"; do
    [ -z "$f" ] || [ -r "$f" ] || { echo "run_bench.sh: cannot read $f" >&2; exit 2; }
  done
  python3 -c 'import torch' 2>/dev/null && have_torch=1
fi
if [ $have_torch = 1 ] && [ -n "${PEAK:-}" ] && [ -n "$TORCH_STEP" ]; then
  if [ -n "$DRY" ]; then echo "python3 $TORCH_STEP --peak --variants '' --out $DEST/torch.jsonl"
  else python3 "$TORCH_STEP" --peak --variants "" --out "$DEST/torch.jsonl" >>"$DEST/bench.log" 2>&1; fi
fi
for shape in $SHAPES; do
  stepc_run "$shape" "$shape"
  anchor=$(torch_cmd "$shape")
  if [ $have_torch = 1 ] && [ -n "$anchor" ]; then
    if [ -n "$DRY" ]; then
      echo "$anchor --variants eager:none,compile:none --out $DEST/torch.jsonl"
      continue
    fi
    # shellcheck disable=SC2086
    PYTHONUNBUFFERED=1 timeout 420 $anchor --variants eager:none,compile:none \
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
[ -z "$DRY" ] || exit 0
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
        # torch_moe.py names its model moe<layers>: the MoE7 row
        model = "MoE" + r["model"][3:] if str(r.get("model", "")).startswith("moe") else r.get("model")
        torch[(model, r.get("variant"))] = r
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
    tfl = f"{tc['tflops'] * tc['step_ms'] / ms:.1f}" if tc and tc.get("ok") and tc.get("tflops") else "-"
    rc = f"{tc['step_ms'] / ms:.3f}x" if tc and tc.get("ok") else "-"
    re_ = f"{te['step_ms'] / ms:.3f}x" if te and te.get("ok") else "-"
    print(f"stepc {name:<10} {ms:9.2f} {tfl:>8} {m['max_allocated_bytes']/1e9:13.3f} {m['predicted_peak_bytes']/1e9:10.3f} {'':>9} {rc:>10} {re_:>9}")
for (shape, var), r in sorted(torch.items()):
    if r.get("ok"):
        tf = f"{r['tflops']:.1f}" if r.get("tflops") else "-"
        print(f"torch {shape} {var:<12} {r['step_ms']:7.2f} {tf:>8} {r['max_alloc_gb']:13.3f} {'':>10} {r['max_reserved_gb']:9.3f}")
    else:
        print(f"torch {shape} {var:<12} {r.get('error')}")
if peak: print("ceilings:", {k: v for k, v in peak.items() if k != "kind"})
PY
cat "$DEST/summary.txt"
