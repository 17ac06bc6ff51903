#!/usr/bin/env bash
# build_dir.sh STEPC — `stepc build -o DIR` loses nothing: a directory of the user's files is
# refused and left as it was, a symbolic link is refused, a failed rebuild leaves the old artifact
# whole, a rebuild replaces it whole, and two builds into one directory at once leave one whole
# artifact (it trains). Exit 0 ok, 1 a failure.
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

# a checkpoint saved inside the artifact's directory, or any file stepc build does not write, makes
# it the user's: the rebuild is refused and every file stays (a step.img alone is not a licence)
"$tmp/art/train" --device cpu --steps 1 --save "$tmp/art/ck" >/dev/null 2>&1 || fail "a checkpoint inside the artifact"
before=$(cd "$tmp/art" && find . -type f | sort | xargs md5sum)
"$stepc" build models/tiny.lua -o "$tmp/art" >"$tmp/9.out" 2>&1 && fail "a rebuild over a checkpoint inside the artifact succeeded"
grep -q "ck, which stepc build does not write" "$tmp/9.out" || { cat "$tmp/9.out"; fail "the refusal does not name ck"; }
[ "$(cd "$tmp/art" && find . -type f | sort | xargs md5sum)" = "$before" ] || fail "the refused rebuild changed the directory"
mkdir "$tmp/img" && cp "$tmp/art/step.img" "$tmp/img/" && echo "thesis" >"$tmp/img/thesis.tex"
"$stepc" build models/tiny.lua -o "$tmp/img" >"$tmp/10.out" 2>&1 && fail "a folder with a step.img and the user's file was replaced"
[ "$(cat "$tmp/img/thesis.tex")" = thesis ] && grep -q "thesis.tex" "$tmp/10.out" || { cat "$tmp/10.out"; fail "step.img + thesis.tex"; }
mkdir "$tmp/fifo" && mkfifo "$tmp/fifo/step.img"
"$stepc" build models/tiny.lua -o "$tmp/fifo" >"$tmp/11.out" 2>&1 && fail "a FIFO named step.img was replaced"
[ -p "$tmp/fifo/step.img" ] && grep -q "not a regular file" "$tmp/11.out" || { cat "$tmp/11.out"; fail "a FIFO named step.img"; }
echo "ok: an artifact holding a checkpoint or the user's files, or a FIFO for step.img, is refused and left as it was"

"$stepc" build models/tiny.lua model.num_layers=2 -o "$tmp/race" >"$tmp/6.out" 2>&1 &
"$stepc" build models/tiny.lua model.num_layers=3 -o "$tmp/race" >"$tmp/7.out" 2>&1 &
wait
"$tmp/race/train" --device cpu --steps 1 >/dev/null 2>"$tmp/8.err" || { cat "$tmp/6.out" "$tmp/7.out" "$tmp/8.err"; fail "two builds at once left a mixed artifact"; }
ls -a "$tmp" | grep -q building && fail "concurrent builds left a directory behind"
echo "ok: two builds into one directory at once leave one whole artifact"
