#!/usr/bin/env bash
# layout.sh STEPC — a stepc finds the runtime it links artifacts from by compiler/cli/layout.h's rule, and
# the artifact cache's key holds what it finds: a copy of STEPC beside a layout file of its own links
# that layout's headers, an edit of one of them is a new artifact (not a cache hit of the old one),
# and a copy with neither a layout file nor an install around it says which file it misses (exit 4).
# Exit 0 ok, 1 a failure, 77 skipped.
set -uo pipefail
stepc=$1
layout=$(dirname "$stepc")/stepc-layout.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v cc >/dev/null || { echo "SKIP: no C compiler"; exit 77; }
[ -f "$layout" ] || fail "no $layout beside $stepc"

mkdir -p "$tmp/bin" "$tmp/h" "$tmp/home" "$tmp/bare/bin"
cp "$stepc" "$tmp/bin/stepc" && cp "$stepc" "$tmp/bare/bin/stepc" || fail "copying stepc"
key() { sed -n "s/^$1 //p" "$layout"; }
cp "$(key api_header)" "$tmp/h/stepc.h" || fail "copying the headers"
printf 'rt_archive %s\nir_archive %s\napi_header %s\nmodels %s\n' "$(key rt_archive)" "$(key ir_archive)" \
  ../h/stepc.h "$(key models)" >"$tmp/bin/stepc-layout.txt"

# the artifact's directory, from `stepc run`'s progress line
built() { HOME="$tmp/home" "$tmp/bin/stepc" run models/tiny.lua model.num_layers=1 --device cpu --steps 1 >"$tmp/$1.out" 2>&1 ||
  { cat "$tmp/$1.out"; fail "stepc run ($1)"; }; sed -n -e 's/^run: built the artifact in /built /p' -e 's/^run: the artifact is cached in /cached /p' "$tmp/$1.out"; }
read -r how1 dir1 <<<"$(built first)"
[ "$how1" = built ] && cmp -s "$dir1/stepc.h" "$tmp/h/stepc.h" || fail "the first run: $how1 $dir1"
read -r how2 dir2 <<<"$(built again)"
[ "$how2" = cached ] && [ "$dir2" = "$dir1" ] || fail "the same stepc and files: not a cache hit ($how2 $dir2)"
echo "ok: the layout file's headers are linked, and a second run is a cache hit"

echo "/* edited */" >>"$tmp/h/stepc.h"
read -r how3 dir3 <<<"$(built edited)"
[ "$how3" = built ] && [ "$dir3" != "$dir1" ] || fail "an edited stepc.h hit the old artifact ($how3 $dir3)"
grep -q "edited" "$dir3/stepc.h" || fail "the new artifact's stepc.h is not the edited one"
echo "ok: an edited runtime header is a new artifact"

HOME="$tmp/home" "$tmp/bare/bin/stepc" build models/tiny.lua -o "$tmp/art" >"$tmp/bare.out" 2>&1
rc=$?
[ $rc -eq 4 ] && grep -q "libstepc_rt.a cannot be read" "$tmp/bare.out" && grep -q "installed around $tmp/bare/bin/stepc" "$tmp/bare.out" ||
  { cat "$tmp/bare.out"; fail "a stepc with no files around it: exit $rc"; }
[ -e "$tmp/art" ] && fail "a failed build left $tmp/art"
echo "ok: a stepc with no files around it says which it misses"
