#!/usr/bin/env bash
# run_artifacts.sh — artifacts on the GPU: each artifact's `train` (its libstep.so playing the launch
# program in step.img) eagerly and as one captured full-iteration graph (`--graph-mode`). The
# losses must be bitwise equal; step times are printed beside.
#   tests/gpu/run_artifacts.sh [STEPS] DIR...
# Build the artifacts where stepc builds (`stepc build SPEC -o DIR`, no GPU needed) and carry them.
# Logs to $OUT (default ./gpu-step-logs). Exit 0 all equal, 1 a difference or failure, 77 no GPU.
set -uo pipefail
steps=8
[[ ${1:-} =~ ^[0-9]+$ ]] && steps=$1 && shift
DEST=${OUT:-gpu-step-logs}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
fails=0
for dir in "$@"; do
  name=$(basename "$dir")
  for how in eager full_iteration; do
    flag="--graph-mode $how"
    # shellcheck disable=SC2086
    "$dir/train" --device cuda --steps "$steps" --json $flag >"$DEST/art_${name}_$how.json" 2>"$DEST/art_${name}_$how.err"
    rc=$?
    [ $rc -eq 0 ] || { echo "FAIL $name $how: exit $rc"; tail -3 "$DEST/art_${name}_$how.err"; fails=1; }
  done
  python3 - "$name" "$DEST/art_${name}_eager.json" "$DEST/art_${name}_full_iteration.json" <<'PY' || fails=1
import json, statistics, sys
name = sys.argv[1]
try:
    a, b = (json.load(open(p)) for p in sys.argv[2:4])
except Exception as e:
    print(f"FAIL {name}: {e}"); sys.exit(1)
la, lb = [s["loss"] for s in a["steps"]], [s["loss"] for s in b["steps"]]
ms = lambda r: statistics.median(s["ms"] for s in r["steps"][len(r["steps"]) // 2:])
ok = la == lb and len(la) > 0 and a.get("mode") == "eager" and b.get("mode") == "full_iteration"
print(f"{'ok' if ok else 'FAIL'} {name}: {len(la)} steps, eager losses {'==' if la == lb else '!='} full-iteration graph losses "
      f"(last {la[-1]!r} vs {lb[-1]!r}); median ms eager {ms(a):.3f}, graph {ms(b):.3f}")
sys.exit(0 if ok else 1)
PY
done
exit $fails
