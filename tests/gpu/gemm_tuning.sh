#!/usr/bin/env bash
# gemm_tuning.sh STEPC TEXT — stepc run --gemm-tuning on a GPU (docs/gpu-runtime.md, "GEMM algorithms"):
# a recipe whose GEMMs have several shapes (tiny, GQA, SwiGLU) trained 30 steps on TEXT with cuBLASLt's
# first-ranked algorithms, then with the fastest of its first 8 timed at open, eagerly and as one
# full-iteration graph, and once through the fp8 recipe (its E4M3 / E5M2 products are timed too).
# The timed runs may pick other algorithms (other bits), so each loss must follow the untimed run's
# within 2% at every step and match its measured peak exactly: the timing writes random operands into
# the step's memory, and a run that trained on what it left there, or that allocated for it, would
# not. Each timed run must also say so in its notice (stepc_notice: how many shapes were timed, how many
# of them run another algorithm than the first-ranked), so that a run where the option did nothing fails.
# Exit 0 when every check holds.
set -uo pipefail
stepc=$1 text=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(models/tiny.lua --device cuda --steps 30 --json "data.path=$text" model.num_query_groups=2
  model.check_for_nan_in_loss_and_grad=false)
fails=0
go() { # NAME ARGS...: one run, its JSON in $tmp/NAME.json
  local name=$1; shift
  "$stepc" run "${common[@]}" "$@" >"$tmp/$name.json" 2>"$tmp/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { echo "FAIL $name: exit $rc: $(tail -3 "$tmp/$name.err")"; fails=$((fails + 1)); }
}
go first
go tuned --gemm-tuning 8
go tuned_graph --gemm-tuning 8 model.cuda_graph_impl=full_iteration
go fp8_first model.fp8=hybrid model.fp8_recipe=tensorwise
go fp8_tuned --gemm-tuning 8 model.fp8=hybrid model.fp8_recipe=tensorwise
for n in tuned tuned_graph fp8_tuned; do
  if grep -qE "[1-9][0-9]* GEMM shapes tuned \(up to 8 of cuBLASLt's ranked algorithms" "$tmp/$n.err"; then
    echo "PASS $n: $(grep -oE "[0-9]+ GEMM shapes tuned.*" "$tmp/$n.err")"
  else echo "FAIL $n: no notice of the timed GEMM algorithms: $(tail -2 "$tmp/$n.err")"; fails=$((fails + 1)); fi
done
if grep -q "GEMM shapes tuned" "$tmp/first.err"; then echo "FAIL first: a notice of timed GEMMs without --gemm-tuning"; fails=$((fails + 1)); fi
python3 - "$tmp" <<'PY' || fails=$((fails + 1))
import json, sys
d = sys.argv[1]
def load(n):
    with open(f"{d}/{n}.json") as f:
        return json.load(f)
bad = 0
for ref, runs in (("first", ("tuned", "tuned_graph")), ("fp8_first", ("fp8_tuned",))):
    r = load(ref)
    for n in runs:
        t = load(n)
        worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(r["steps"], t["steps"]))
        same_peak = r["measure"]["max_allocated_bytes"] == t["measure"]["max_allocated_bytes"]
        ok = len(t["steps"]) == len(r["steps"]) == 30 and worst <= 2e-2 and same_peak
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} {n} vs {ref}: worst relative loss difference {worst:.2e} (limit 2e-2), "
              f"last loss {t['steps'][-1]['loss']:.6f} vs {r['steps'][-1]['loss']:.6f}, max allocated "
              f"{t['measure']['max_allocated_bytes']} vs {r['measure']['max_allocated_bytes']}")
sys.exit(1 if bad else 0)
PY
exit $((fails > 0))
