#!/usr/bin/env bash
# build_dir.sh STEPC — `stepc build -o DIR` loses nothing: a directory of the user's files is
# refused and left as it was, a symbolic link is refused, a failed rebuild leaves the old artifact
# whole, a rebuild replaces it whole, and two builds into one directory at once leave one whole
# artifact (its step.c matches its step image: it trains). Exit 0 ok, 1 a failure.
set -uo pipefail
stepc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v cc >/dev/null || { echo "SKIP: no C compiler"; exit 77; }

mkdir "$tmp/mine" && echo "my notes" >"$tmp/mine/notes.txt" && cp models/tiny.lua "$tmp/mine/recipe.lua"
"$stepc" build models/tiny.lua -o "$tmp/mine" >"$tmp/1.out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "not a stepc artifact" "$tmp/1.out" || { cat "$tmp/1.out"; fail "a folder of the user's files: exit $rc"; }
[ "$(cat "$tmp/mine/notes.txt")" = "my notes" ] && cmp -s models/tiny.lua "$tmp/mine/recipe.lua" && [ "$(ls "$tmp/mine" | wc -l)" -eq 2 ] ||
  fail "the user's folder was changed"
echo "ok: a folder of the user's files is refused and left as it was"

mkdir "$tmp/elsewhere" && ln -s "$tmp/elsewhere" "$tmp/link"
"$stepc" build models/tiny.lua -o "$tmp/link" >"$tmp/2.out" 2>&1 && fail "a symbolic link was built through"
grep -q "symbolic link" "$tmp/2.out" && [ -z "$(ls "$tmp/elsewhere")" ] || { cat "$tmp/2.out"; fail "the symbolic link"; }
echo "ok: a symbolic link is refused"

"$stepc" build models/tiny.lua -o "$tmp/art" >"$tmp/3.out" 2>&1 || { cat "$tmp/3.out"; fail "first build"; }
sum=$(cat "$tmp/art"/step.img "$tmp/art"/libstep.so | md5sum)
CC=false "$stepc" build models/tiny.lua model.num_layers=1 -o "$tmp/art" >"$tmp/4.out" 2>&1 && fail "a build with a failing C compiler succeeded"
[ "$(cat "$tmp/art"/step.img "$tmp/art"/libstep.so | md5sum)" = "$sum" ] || fail "a failed rebuild changed the old artifact"
ls -a "$tmp" | grep -q building && fail "a failed build left its directory behind"
"$tmp/art/train" --device cpu --steps 1 >/dev/null 2>&1 || fail "the old artifact no longer trains after a failed rebuild"
echo "ok: a failed rebuild leaves the old artifact whole"

"$stepc" build models/tiny.lua model.num_layers=1 -o "$tmp/art" >"$tmp/5.out" 2>&1 || { cat "$tmp/5.out"; fail "rebuild"; }
[ "$(cat "$tmp/art"/step.img "$tmp/art"/libstep.so | md5sum)" != "$sum" ] || fail "the rebuild did not replace the artifact"
"$tmp/art/train" --device cpu --steps 1 >/dev/null 2>&1 || fail "the rebuilt artifact does not train"
echo "ok: a rebuild replaces the artifact whole"

"$stepc" build models/tiny.lua model.num_layers=2 -o "$tmp/race" >"$tmp/6.out" 2>&1 &
"$stepc" build models/tiny.lua model.num_layers=3 -o "$tmp/race" >"$tmp/7.out" 2>&1 &
wait
"$tmp/race/train" --device cpu --steps 1 >/dev/null 2>"$tmp/8.err" || { cat "$tmp/6.out" "$tmp/7.out" "$tmp/8.err"; fail "two builds at once left a mixed artifact"; }
ls -a "$tmp" | grep -q building && fail "concurrent builds left a directory behind"
echo "ok: two builds into one directory at once leave one whole artifact"
