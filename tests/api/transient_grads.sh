#!/usr/bin/env bash
# transient_grads.sh STEPC — main gradients with one micro-batch a step (optimizer.c, memplan.c):
#   the plan keeps them transient (zeroed in the backward before their first write, live to the
#   optimizer): fewer gradient bytes at the peak than the pinned gradients of the same recipe with two
#   micro-batches, and the persistent bytes smaller by exactly every gradient's bytes; and a CPU step
#   with transient gradients is bitwise one with pinned ones: DP 2 with one micro-batch a rank against
#   DP 1 with two accumulated micro-batches (the same global batch, the same sums: dp.sh's
#   equality), per-step loss, learning rate and grad norm, for a dense, an MoE and an fp8 recipe.
set -uo pipefail
stepc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export STEPC_CACHE_DIR=$tmp/cache
fail() { echo "FAIL: $*"; exit 1; }
# recipe, micro-batch size
for case in models/tiny.lua:4 tests/recipes/tiny_mla_moe.lua:2 tests/recipes/tiny_fp8.lua:4; do
  r=${case%:*} mb=${case#*:} n=$(basename "$r" .lua)
  "$stepc" plan "$r" train.global_batch_size=$mb --json >"$tmp/$n.1.json" || fail "stepc plan $r, one micro-batch"
  "$stepc" plan "$r" train.global_batch_size=$((2 * mb)) --json >"$tmp/$n.2.json" || fail "stepc plan $r, two"
  python3 - "$tmp/$n.1.json" "$tmp/$n.2.json" "$r" <<'PY' || fail "$r: the plan's gradients"
import json, sys
one, two = (json.load(open(f))["arena"] for f in sys.argv[1:3])
grads = two["at_peak"]["gradients"]  # pinned: every gradient is live at every point
assert grads > 0, "no gradients"
assert one["at_peak"]["gradients"] < grads, (one["at_peak"], grads)
assert one["persistent_bytes"] <= two["persistent_bytes"] - grads, (one["persistent_bytes"], two["persistent_bytes"], grads)
assert one["peak_bytes"] < two["peak_bytes"], (one["peak_bytes"], two["peak_bytes"])
print(f"{sys.argv[3]}: gradients at the peak {one['at_peak']['gradients']} of {grads}; peak {one['peak_bytes']} (two micro-batches {two['peak_bytes']})")
PY
  "$stepc" run "$r" train.global_batch_size=$((2 * mb)) --device cpu --steps 4 --json >"$tmp/$n.dp1" 2>"$tmp/$n.dp1.err" ||
    { cat "$tmp/$n.dp1.err"; fail "$r: DP 1, two micro-batches"; }
  "$stepc" run "$r" train.world_size=2 train.global_batch_size=$((2 * mb)) --device cpu --steps 4 --json --nproc 2 \
    >"$tmp/$n.dp2" 2>"$tmp/$n.dp2.err" || { cat "$tmp/$n.dp2.err"; fail "$r: DP 2, one micro-batch"; }
  python3 - "$tmp/$n.dp1" "$tmp/$n.dp2" "$r" <<'PY' || fail "$r: transient gradients against pinned ones"
import json, sys
def steps(f):
    runs = [json.loads(l) for l in open(f) if l.startswith("{")]
    assert runs, f"{f}: no JSON"
    return [[(s["step"], s["loss"], s["lr"], s["grad_norm"]) for s in r["steps"]] for r in runs]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert len(a[0]) == 4 and all(x == a[0] for x in b), (a, b)
print(f"{sys.argv[3]}: DP 2 (transient) = DP 1 with two micro-batches (pinned), bitwise over 4 steps")
PY
done
echo "ok"
