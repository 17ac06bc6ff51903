#!/usr/bin/env bash
# tests/api/inputs.sh STEPC TEST_IMAGE — inputs an artifact's users give it, refused with a message
# and a documented exit code instead of a signal or a silent default (one one-layer artifact built
# here):
#   a re-signed step.img with one fact edited is refused at open, naming the field (test_image.c),
#     the flash alternatives of an attention_backend=auto program among them;
#   train's arguments: --steps that is not a whole number in range, --device not cpu|cuda|auto, an
#     option without its value: exit 3 (they used to fall back to train_iters steps and auto);
#   a truncated libstep.so: train and `stepc run DIR` exit 4 with "is damaged" (they died of SIGBUS
#     inside the dynamic loader), checked against libstep.sum;
#   a host compile that fails: stepc build's message carries the compiler's error lines (it used to
#     point at a build.log already removed with the unfinished artifact);
#   a recipe whose path holds "*/" (stepc check accepted it, the host source stepc generated then did
#     not compile) builds and trains.
set -uo pipefail
stepc=$1 test_image=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=1; }
recipe=(tests/recipes/gpt3_tiny.lua model.num_layers=1)
"$stepc" build "${recipe[@]}" -o "$tmp/a" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$stepc" build models/tiny.lua model.attention_backend=auto -o "$tmp/auto" >"$tmp/build_auto.log" 2>&1 || { cat "$tmp/build_auto.log"; exit 1; }
"$stepc" build models/tiny.lua train.force_parallel_lowering=true model.sequence_parallel=true -o "$tmp/comm" >"$tmp/build_comm.log" 2>&1 || { cat "$tmp/build_comm.log"; exit 1; }
"$test_image" "$tmp/a" "$tmp/auto" "$tmp/comm" || fail "an edited step.img was not refused with its field named"
# expect CODE TEXT CMD...: exit CODE (never a signal) and TEXT on stderr
expect() {
  local code=$1 text=$2
  shift 2
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$text" "$tmp/out"; then fail "$* -> exit $rc (want $code, \"$text\"): $(head -3 "$tmp/out")"
  else echo "ok: $* -> $rc"; fi
}
expect 3 "--steps wants a whole number in [1, 1073741824], not abc" "$tmp/a/train" --steps abc
expect 3 "--steps wants a whole number in [1, 1073741824], not 0" "$tmp/a/train" --steps 0
expect 3 "--device is cpu, cuda or auto, not bogus" "$tmp/a/train" --device bogus
expect 3 "--steps needs a value" "$tmp/a/train" --steps
expect 3 "unknown argument --stesp" "$tmp/a/train" --stesp 3
expect 0 "step     2" "$tmp/a/train" --device cpu --steps 2
# a truncated libstep.so, and one with a byte changed
cp -r "$tmp/a" "$tmp/t"
truncate -s 100000 "$tmp/t/libstep.so"
expect 4 "libstep.so is damaged: 100000 bytes" "$tmp/t/train" --device cpu --steps 1
expect 4 "libstep.so is damaged: 100000 bytes" "$stepc" run "$tmp/t" --device cpu --steps 1
cp "$tmp/a/libstep.so" "$tmp/t/libstep.so"
printf 'X' | dd of="$tmp/t/libstep.so" bs=1 seek=5000 conv=notrunc status=none
expect 4 "is damaged" "$tmp/t/train" --device cpu --steps 1
rm "$tmp/t/libstep.sum"
expect 4 "libstep.sum is missing" "$stepc" run "$tmp/t" --device cpu --steps 1
# a failing host compile: its error lines in the message
printf '#!/bin/sh\necho "step.c:12:3: error: the host compile failed here" >&2\nexit 1\n' >"$tmp/badcc"
chmod +x "$tmp/badcc"
CC=$tmp/badcc expect 4 "step.c:12:3: error: the host compile failed here" "$stepc" build "${recipe[@]}" -o "$tmp/b"
[ -e "$tmp/b" ] && fail "a failed build left $tmp/b"
# a recipe that stepc check accepts must build: one whose path holds a star before a slash closed
# the opening comment of the host source stepc once generated (step.c), and the host compile failed
mkdir "$tmp/runs*"
cp tests/recipes/gpt3_tiny.lua "$tmp/runs*/r.lua"
expect 0 "ok" "$stepc" check "$tmp/runs*/r.lua" model.num_layers=1
expect 0 "libstep.sum" "$stepc" build "$tmp/runs*/r.lua" model.num_layers=1 -o "$tmp/c"
expect 0 "step     1" "$tmp/c/train" --device cpu --steps 1
exit $fails
