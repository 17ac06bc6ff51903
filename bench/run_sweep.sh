#!/usr/bin/env bash
# run_sweep.sh — the recompute guide's matched-control protocol on one GPU (docs/recompute.md):
#   OUT=dir bench/run_sweep.sh RECIPE 'CAND1;CAND2;...' [KEY=VALUE ...]
# `stepc sweep` predicts each candidate's max allocated and step time; then each candidate runs
# (`stepc run RECIPE --device cuda`, full_iteration graph, STEPS steps, selective recompute of the
# candidate's modules; `[]` = none) and the table sets the prediction beside the measurement:
# peak (predicted / measured max allocated / error), step time (predicted / measured median of the
# second half / error) and each side's delta against the `[]` control. Logs and JSON to $OUT
# (summary.txt is the table). Exit 0 when every candidate ran.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEST=${OUT:-sweep-out}
STEPS=${STEPS:-10}
[ $# -ge 2 ] || { echo "usage: bench/run_sweep.sh RECIPE 'CAND;CAND;...' [KEY=VALUE ...]" >&2; exit 2; }
recipe=$1 cands=$2
shift 2
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
"$BUILD/stepc" sweep "$recipe" "$@" --candidates "$cands" --json >"$DEST/sweep.json" 2>"$DEST/sweep.err" ||
  { echo "stepc sweep failed: $(tail -2 "$DEST/sweep.err")"; exit 1; }
fails=0
IFS=';' read -ra list <<<"$cands"
for c in "${list[@]}"; do
  name=$(echo "$c" | tr -c 'a-z0-9_\n' '_')
  [ "$c" = "[]" ] && name=none
  if [ "$c" = "[]" ]; then mods=(); else mods=(model.recompute_granularity=selective "model.recompute_modules=[$c]"); fi
  timeout 300 "$BUILD/stepc" run "$recipe" "$@" "${mods[@]}" --device cuda --steps "$STEPS" --json \
    model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false >"$DEST/run_$name.json" 2>"$DEST/run_$name.err" ||
    { echo "FAIL $c: $(tail -2 "$DEST/run_$name.err")"; fails=$((fails + 1)); }
done
python3 - "$DEST" "$cands" <<'PY' | tee "$DEST/summary.txt"
import json, os, statistics, sys
d, cands = sys.argv[1], sys.argv[2].split(";")
pred = {r["candidate"]: r for r in json.load(open(os.path.join(d, "sweep.json")))["rows"]}
rows = []
for c in cands:
    name = "none" if c == "[]" else "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in c)
    try:
        r = json.load(open(os.path.join(d, f"run_{name}.json")))
    except Exception:
        print(f"{c}: no measurement"); continue
    ms = [s["ms"] for s in r["steps"]]
    rows.append((c, pred[c]["peak_bytes"] / 1e9, r["measure"]["max_allocated_bytes"] / 1e9, pred[c]["step_time_s"] * 1e3,
                 statistics.median(ms[len(ms) // 2:])))
print("| candidate | peak predicted | max allocated | error | delta predicted | delta measured | step predicted | step measured | error | time delta predicted | measured |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
base = rows[0] if rows and rows[0][0] == "[]" else None
for c, pp, pm, tp, tm in rows:
    dp = f"{100 * (pp / base[1] - 1):+.2f}%" if base else "-"
    dm = f"{100 * (pm / base[2] - 1):+.2f}%" if base else "-"
    tdp = f"{100 * (tp / base[3] - 1):+.1f}%" if base else "-"
    tdm = f"{100 * (tm / base[4] - 1):+.1f}%" if base else "-"
    print(f"| `{c}` | {pp:.3f} GB | {pm:.3f} GB | {100 * (pp / pm - 1):+.2f}% | {dp} | {dm} | {tp:.1f} ms | {tm:.1f} ms | "
          f"{100 * (tp / tm - 1):+.1f}% | {tdp} | {tdm} |")
PY
exit $((fails > 0))
