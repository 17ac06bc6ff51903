#!/usr/bin/env bash
# run_attn_fallback.sh — attention_backend=auto where cuDNN has no engine, on the GPU (issue 26 item 5):
# an auto artifact opened with cuDNN counted as engine-less (the test knob STEPC_TEST_CUDNN_NO_ENGINE=1,
# runtime/cuda/player.h) must fall back to stepc's own attention kernels at open, say so once on
# stderr, and train to the very bits of the same recipe built with attention_backend=flash, eagerly
# and as one captured full-iteration graph. Also, where this machine's loader finds libcudnn.so.9
# only through LD_LIBRARY_PATH, the same with cuDNN really unloadable (those directories dropped).
#   tests/gpu/run_attn_fallback.sh [STEPS] [RECIPE [KEY=VALUE ...]]     (default: 20 models/tiny.lua)
# Run from the repository root with build/ present; the artifacts are built with build/stepc unless
# ART_AUTO and ART_FLASH name prebuilt ones (built elsewhere: `stepc build RECIPE
# model.attention_backend=auto|flash -o DIR`). Logs to $OUT (default ./gpu-attn-fallback-logs).
# Prints PASS and exits 0 when every check holds; FAIL lines and exit 1 otherwise; 77 without a GPU.
set -uo pipefail
steps=20
[[ ${1:-} =~ ^[0-9]+$ ]] && steps=$1 && shift
recipe=(models/tiny.lua)
[ $# -gt 0 ] && recipe=("$@")
DEST=${OUT:-gpu-attn-fallback-logs}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=1; }
auto=${ART_AUTO:-$DEST/auto} flash=${ART_FLASH:-$DEST/flash}
if [ -z "${ART_AUTO:-}" ]; then
  for b in auto flash; do
    rm -rf "${DEST:?}/$b"
    build/stepc build "${recipe[@]}" model.attention_backend=$b -o "$DEST/$b" >"$DEST/build_$b.log" 2>&1 ||
      { tail -5 "$DEST/build_$b.log"; echo "FAIL: stepc build attention_backend=$b"; exit 1; }
  done
  grep '^build: run-time libraries' "$DEST"/build_*.log
fi
# LOG MODE ENV...: the artifact's train, eager or full_iteration, with extra environment
run_train() {
  local dir=$1 log=$2 mode=$3
  shift 3
  env "$@" "$dir/train" --device cuda --steps "$steps" --json --graph-mode "$mode" >"$DEST/$log.json" 2>"$DEST/$log.err"
  local rc=$?
  [ $rc -eq 0 ] || { fail "$log: exit $rc"; tail -3 "$DEST/$log.err"; }
}
same() { # A B: the step records' loss and grad_norm bitwise equal
  python3 - "$DEST/$1.json" "$DEST/$2.json" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p))["steps"] for p in sys.argv[1:3])
except Exception as e:
    print(f"FAIL: {e}"); sys.exit(1)
bad = [i for i, (x, y) in enumerate(zip(a, b)) if (x["loss"], x["grad_norm"]) != (y["loss"], y["grad_norm"])]
if len(a) != len(b) or not a or bad:
    print(f"FAIL: {sys.argv[1]} vs {sys.argv[2]}: {len(a)}/{len(b)} steps, first difference at step {bad[:1]}")
    sys.exit(1)
print(f"ok: {len(a)} steps bitwise equal, last loss {a[-1]['loss']!r}")
PY
}
notices() { grep -c '^train: attention: ' "$DEST/$1.err"; }
for mode in eager full_iteration; do
  run_train "$flash" "flash_$mode" "$mode"
  run_train "$auto" "auto_noengine_$mode" "$mode" STEPC_TEST_CUDNN_NO_ENGINE=1
  n=$(notices "auto_noengine_$mode")
  [ "$n" = 1 ] || fail "auto_noengine_$mode: $n attention notices on stderr (want exactly 1)"
  grep -q "^train: attention: cuDNN has no engine .*(simulated: STEPC_TEST_CUDNN_NO_ENGINE is set); stepc's own attention kernels run every attention op instead" \
    "$DEST/auto_noengine_$mode.err" || fail "auto_noengine_$mode: no fallback notice"
  same "flash_$mode" "auto_noengine_$mode" || fail "$mode: the fallback's losses are not the flash artifact's"
  # cuDNN as this machine has it (informative: a real fallback says so on stderr)
  run_train "$auto" "auto_$mode" "$mode"
  echo "auto with this machine's cuDNN ($mode): $(notices "auto_$mode") notices, last step $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['steps'][-1])" "$DEST/auto_$mode.json" 2>/dev/null)"
done
# stepc run says it once too
STEPC_TEST_CUDNN_NO_ENGINE=1 build/stepc run "$auto" --device cuda --steps 2 >"$DEST/run_noengine.out" 2>"$DEST/run_noengine.err" ||
  fail "stepc run (no engine): exit $?"
n=$(grep -c '^stepc run: attention: ' "$DEST/run_noengine.err")
[ "$n" = 1 ] || fail "stepc run (no engine): $n attention notices on stderr (want exactly 1)"
# cuDNN really unloadable: only where the loader finds it through LD_LIBRARY_PATH alone
if ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9 '; then
  echo "SKIP real unload: libcudnn.so.9 is in the loader's cache (ldconfig -p), LD_LIBRARY_PATH cannot hide it"
else
  keep=()
  IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"
  for d in "${dirs[@]}"; do [ -n "$d" ] && ! ls "$d"/libcudnn.so.9* >/dev/null 2>&1 && keep+=("$d"); done
  hidden=$(IFS=:; echo "${keep[*]:-}")
  run_train "$auto" auto_nocudnn_eager eager LD_LIBRARY_PATH="$hidden"
  if grep -q '^train: attention: cuDNN 9 cannot be loaded' "$DEST/auto_nocudnn_eager.err"; then
    [ "$(notices auto_nocudnn_eager)" = 1 ] || fail "auto without libcudnn: not exactly one notice"
    same flash_eager auto_nocudnn_eager || fail "auto without libcudnn: the losses are not the flash artifact's"
  else
    echo "SKIP real unload: libcudnn.so.9 still loads with LD_LIBRARY_PATH=$hidden"
  fi
fi
[ $fails = 0 ] && echo "PASS: attention_backend=auto without a cuDNN engine trains to the flash artifact's bits (eager and full_iteration), one notice" || echo "FAIL"
exit $fails
