#!/usr/bin/env bash
# profile_shapes.sh DIR... — for each artifact: STEPS steps as built (its graph mode), then one step
# profiled eagerly (`stepc run DIR --profile --json`): the measured step time beside the cost
# model's prediction, and the time per op class. JSON per artifact and a summary to $OUT.
set -uo pipefail
DEST=${OUT:-profile-logs}
STEPS=${STEPS:-8}
STEPC=${STEPC:-build/stepc}
mkdir -p "$DEST"
for dir in "$@"; do
  name=$(basename "$dir")
  "$STEPC" run "$dir" --device cuda --steps "$STEPS" --profile --json >"$DEST/$name.json" 2>"$DEST/$name.err" ||
    { echo "FAIL $name: $(tail -2 "$DEST/$name.err")"; continue; }
done
python3 - "$DEST" "$@" <<'PY' | tee "$DEST/summary.txt"
import json, os, statistics, sys
d = sys.argv[1]
for a in sys.argv[2:]:
    n = os.path.basename(a)
    try:
        r = json.load(open(os.path.join(d, n + ".json")))
    except Exception as e:
        print(f"{n}: {e}"); continue
    steps = r["steps"]
    graph = [s["ms"] for s in steps[len(steps) // 2:]]
    p = r["profile"]
    med = statistics.median(graph)
    print(f"{n}: step {med:.2f} ms ({r['mode']}); profiled eager step {p['step_ms']:.2f} ms, points {p['points_ms']:.2f}; "
          f"predicted {p['predicted_ms']:.2f} ms ({100 * (p['predicted_ms'] / med - 1):+.1f}%), roofline {p['roofline_ms']:.2f}")
    for c in p["classes"]:
        print(f"    {c['class']:<14} {c['ops']:5d} ops {c['ms']:9.3f} ms  roofline {c['roofline_ms']:9.3f}  x{c['ms'] / c['roofline_ms'] if c['roofline_ms'] else 0:6.2f}")
PY
