#!/usr/bin/env bash
# attn_fallback.sh STEPC PROGRAM_PLAY — attention_backend=auto on a machine where cuDNN has no engine
# (issue 26 item 5), without a GPU: tiny built three times (auto, flash, fused) and played by the
# runtime's player on a recording device (PROGRAM_PLAY, tests/api/program_play.c), with and without
# the test knob STEPC_TEST_CUDNN_NO_ENGINE=1 that makes cuDNN count as having no engine.
#  - auto's program holds a flash alternative at every attention point (plan.json, program.txt);
#    flash's and fused's hold none;
#  - `stepc build` states each artifact's run-time libraries, cuDNN only where it calls cuDNN;
#  - auto with cuDNN plays exactly what the fused artifact plays (the digest of every launch);
#  - auto without an engine falls back at open with exactly one notice and plays exactly what the
#    flash artifact plays, no cuDNN call among it;
#  - fused without an engine refuses to open, naming cuDNN.
# Before the alternatives, auto's program was cuDNN's alone and failed at its first step there.
set -uo pipefail
stepc=$1
play=$2
command -v cc >/dev/null || { echo "SKIP: no build toolchain here (cc missing)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=1; }
for b in auto flash fused; do
  "$stepc" build models/tiny.lua model.attention_backend=$b -o "$tmp/$b" >"$tmp/$b.build" 2>&1 ||
    { cat "$tmp/$b.build"; echo "FAIL: stepc build attention_backend=$b"; exit 1; }
done
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['arena']['launch_program'][sys.argv[2]])" "$1" "$2"; }
# the program: alternatives where auto calls cuDNN, none elsewhere
for b in auto flash fused; do
  att=$(field "$tmp/$b/plan.json" attention) alts=$(field "$tmp/$b/plan.json" flash_alternatives)
  listed=$(grep -c "^  alternative (stepc's flash kernels" "$tmp/$b/program.txt")
  # the step's points only (the evaluation section lists its own "eval point"s after them)
  sdpa_points=$(awk '/^[^ ]/{p=""} /^point /{p=$0} /^  SDPA /{if (p != "") print p}' "$tmp/$b/program.txt" | sort -u | wc -l)
  want_att=$b; [ "$b" = fused ] && want_att=cudnn
  [ "$att" = "$want_att" ] || fail "$b: plan.json says attention $att"
  [ "$alts" = "$listed" ] || fail "$b: plan.json counts $alts flash alternatives, program.txt lists $listed"
  if [ "$b" = auto ]; then
    [ "$alts" -gt 0 ] && [ "$alts" = "$sdpa_points" ] || fail "auto: $alts flash alternatives for $sdpa_points points with a cuDNN call"
  else
    [ "$alts" = 0 ] || fail "$b: $alts flash alternatives"
  fi
  n=$(grep -c '^build: run-time libraries (cuda): libcuda, cuBLASLt' "$tmp/$b.build")
  [ "$n" = 1 ] || fail "$b: stepc build printed $n run-time library lines"
  libs=$(grep '^build: run-time libraries' "$tmp/$b.build")
  case $b in
  flash) grep -q cuDNN <<<"$libs" && fail "flash: the run-time libraries name cuDNN: $libs" ;;
  auto) grep -q "cuDNN 9 (libcudnn.so.9, attention: attention_backend=auto.*own attention kernels.*load NVRTC" <<<"$libs" || fail "auto: $libs" ;;
  fused) grep -q "cuDNN 9 (libcudnn.so.9, attention: required.*load NVRTC" <<<"$libs" || fail "fused: $libs" ;;
  esac
  [ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['arena']['launch_program']['runtime_libraries'])" "$tmp/$b/plan.json")" = "${libs#build: run-time libraries (cuda): }" ] ||
    fail "$b: plan.json's runtime_libraries is not stepc build's line"
done
digest() { grep '^played digest' "$1" | cut -d' ' -f3; }
"$play" "$tmp/fused" >"$tmp/fused.play" 2>&1 || { cat "$tmp/fused.play"; fail "fused: program_play"; }
"$play" "$tmp/auto" >"$tmp/auto.play" 2>&1 || { cat "$tmp/auto.play"; fail "auto: program_play"; }
grep -q '^attention: cudnn' "$tmp/auto.play" || fail "auto with cuDNN: $(grep '^attention' "$tmp/auto.play")"
grep -q '^notice:' "$tmp/auto.play" && fail "auto with cuDNN gave a notice"
[ "$(digest "$tmp/auto.play")" = "$(digest "$tmp/fused.play")" ] || fail "auto with cuDNN does not play what fused plays"
export STEPC_TEST_CUDNN_NO_ENGINE=1
"$play" "$tmp/flash" >"$tmp/flash.play" 2>&1 || { cat "$tmp/flash.play"; fail "flash: program_play"; }
grep -q '^notice:' "$tmp/flash.play" && fail "flash gave a notice"
"$play" "$tmp/auto" >"$tmp/auto_no.play" 2>&1 || { cat "$tmp/auto_no.play"; fail "auto without an engine: program_play"; }
grep -q '^attention: flash (0 cuDNN calls played' "$tmp/auto_no.play" || fail "auto without an engine: $(grep '^attention' "$tmp/auto_no.play")"
n=$(grep -c '^notice:' "$tmp/auto_no.play")
[ "$n" = 1 ] || fail "auto without an engine: $n notices"
grep -q "^notice: attention: cuDNN has no engine for this .* attention (simulated: STEPC_TEST_CUDNN_NO_ENGINE is set); stepc's own attention kernels run every attention op instead (attention_backend=auto)" "$tmp/auto_no.play" ||
  fail "auto without an engine: the notice is $(grep '^notice' "$tmp/auto_no.play")"
[ "$(digest "$tmp/auto_no.play")" = "$(digest "$tmp/flash.play")" ] || fail "auto without an engine does not play what the flash artifact plays"
"$play" "$tmp/fused" >"$tmp/fused_no.play" 2>&1 && fail "fused without an engine opened"
grep -q "program_play: cuDNN has no engine .*runs on cuDNN alone (attention_backend=fused" "$tmp/fused_no.play" ||
  fail "fused without an engine: $(cat "$tmp/fused_no.play")"
[ $fails = 0 ] && echo "ok: auto holds $(field "$tmp/auto/plan.json" flash_alternatives) flash alternatives; without an engine it plays the flash artifact's launches (digest $(digest "$tmp/auto_no.play")) with one notice; fused refuses"
exit $fails
