#!/usr/bin/env bash
# fp8_param.sh STEPC TRAIN_TEXT PROGRAM_PLAY — model.fp8_param (fp8 primary weights, docs/fp8.md) on
# tests/recipes/tiny_fp8.lua (current scaling) and tiny_fp8_delayed.lua:
#  - the artifact's plan.json and `stepc plan --json` hold the same per-rank params and weights (the
#    fp8 data, transpose and scale_inv of each fp8 linear, no bf16 copy);
#  - its CUDA launch program (the masters' casts by fp8_cast_transpose_f32) plays on a recording device;
#  - on the CPU device its losses are bitwise those of the same recipe without fp8_param: both cast
#    the same fp32 values (the CPU keeps a bf16 param at the master's fp32 value; on the GPU the step
#    without fp8_param casts bf16(master), tests/gpu/fp8.c run_cast_f32 holds that relation), for
#    every step, not just the first;
#  - it trains: the mean loss of the last 5 of 40 steps is below the first 5's.
set -uo pipefail
stepc=$1 bin=$2 play=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for r in tiny_fp8 tiny_fp8_delayed; do
  recipe=tests/recipes/$r.lua
  "$stepc" build "$recipe" model.fp8_param=true -o "$tmp/$r" >"$tmp/b.out" 2>&1 || { cat "$tmp/b.out"; fail "$r build"; }
  "$stepc" build "$recipe" -o "$tmp/$r.base" >"$tmp/b.out" 2>&1 || { cat "$tmp/b.out"; fail "$r base build"; }
  "$stepc" plan "$recipe" model.fp8_param=true --json >"$tmp/$r.plan.json" 2>/dev/null || fail "$r plan"
  python3 - "$tmp/$r.plan.json" "$tmp/$r/plan.json" "$r" <<'PY' || fail "$r: plan.json against stepc plan"
import json, sys
a, b = (json.load(open(p))["ranks"][0] for p in sys.argv[1:3])
for k in ("params", "weights_bytes"):
    if a[k] != b[k]:
        sys.exit(f"{sys.argv[3]}: {k}: stepc plan {a[k]}, the artifact's plan.json {b[k]}")
print(f"ok: {sys.argv[3]}: plan.json = stepc plan: {a['params']} params, {a['weights_bytes']} B of weights")
PY
  grep -q "fp8_cast_transpose_f32" "$tmp/$r/program.txt" || fail "$r: no cast of the masters in program.txt"
  "$play" "$tmp/$r" >"$tmp/play.txt" 2>&1 || { cat "$tmp/play.txt"; fail "$r: launch program played"; }
  head -1 "$tmp/play.txt"
  "$bin" "$tmp/$r" --device cpu --steps 6 >"$tmp/p" 2>"$tmp/p.err" || { cat "$tmp/p.err"; fail "$r run"; }
  "$bin" "$tmp/$r.base" --device cpu --steps 6 >"$tmp/q" 2>"$tmp/q.err" || { cat "$tmp/q.err"; fail "$r base run"; }
  diff <(awk '{print $2, $NF}' "$tmp/p") <(awk '{print $2, $NF}' "$tmp/q") || fail "$r: losses differ from the bf16-param step"
  echo "ok: $r: 6 losses bitwise those without fp8_param"
done
"$bin" "$tmp/tiny_fp8" --device cpu --steps 40 >"$tmp/long" 2>"$tmp/long.err" || { cat "$tmp/long.err"; fail "40 steps"; }
python3 - "$tmp/long" <<'PY' || fail "the loss did not fall"
import sys
l = [float.fromhex(x.split()[-1]) for x in open(sys.argv[1])]
a, b = sum(l[:5]) / 5, sum(l[-5:]) / 5
print(f"mean loss, steps 1-5: {a:.4f}; steps 36-40: {b:.4f}")
sys.exit(0 if b < a else 1)
PY
echo "ok: fp8_param"
