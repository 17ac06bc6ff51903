#!/usr/bin/env bash
# resume.sh STEPC TRAIN_TEXT DEVICE RECIPE [KEY=VALUE ...] — the recipe built into an artifact,
# then the example trainer on it: N steps without a break, then K steps + a checkpoint, then a
# fresh process resumed from it: the resumed run's losses must be bitwise those of the
# uninterrupted one (compared on the %a bits). Exit 77 (skip) when DEVICE is cuda and there is no GPU.
set -uo pipefail
stepc=$1 bin=$2 dev=$3 recipe=$4
shift 4
N=${RESUME_STEPS:-6} K=${RESUME_AT:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$tmp/art
"$stepc" build "$recipe" "$@" -o "$src" >"$tmp/build.out" 2>&1 || { cat "$tmp/build.out"; exit 1; }
set --
"$bin" "$src" "$@" --device "$dev" --steps "$N" >"$tmp/full" 2>"$tmp/full.err"
rc=$?
[ $rc -eq 77 ] && { cat "$tmp/full.err"; exit 77; }
[ $rc -ne 0 ] && { cat "$tmp/full.err"; exit 1; }
"$bin" "$src" "$@" --device "$dev" --steps "$K" --save-at "$K" --ckpt "$tmp/ckpt" >"$tmp/first" 2>"$tmp/first.err" || { cat "$tmp/first.err"; exit 1; }
"$bin" "$src" "$@" --device "$dev" --steps "$N" --resume "$tmp/ckpt" >"$tmp/second" 2>"$tmp/second.err" || { cat "$tmp/second.err"; exit 1; }
cat "$tmp/first" "$tmp/second" >"$tmp/resumed"
echo "uninterrupted:"; cat "$tmp/full"
echo "resumed (checkpoint at step $K):"; cat "$tmp/resumed"
cat "$tmp/second.err"
ls -l "$tmp/ckpt"
if [ "$(wc -l <"$tmp/full")" -ne "$N" ]; then echo "FAIL: $N steps expected"; exit 1; fi
if ! diff <(awk '{print $2, $NF}' "$tmp/full") <(awk '{print $2, $NF}' "$tmp/resumed"); then
  echo "FAIL: the resumed losses differ from the uninterrupted run"
  exit 1
fi
echo "ok: $N losses bitwise equal across a checkpoint at step $K"
