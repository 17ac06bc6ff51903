#!/usr/bin/env bash
# install.sh SRC CC SANITIZE — an installed stepc stands alone (docs/install.md): a copy of the source
# tree is configured, built (stepc and its runtime archives only) and installed to a prefix; the copy
# and its build tree are deleted; then, with nothing in the environment but PATH and a fresh HOME, the
# installed stepc checks, builds and runs the installed tiny recipe and a recipe of the user's that
# pulls it in by name, and the artifact trains. SANITIZE (ON/OFF) is the enclosing build's, so that
# the ASan job tests an ASan stepc. Exit 0 ok, 1 a failure, 77 skipped.
set -uo pipefail
src=$1 cc=$2 sanitize=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v cmake >/dev/null || { echo "SKIP: no cmake"; exit 77; }
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

# The tree as it is checked out (tracked and new files), never its build folders.
mkdir "$tmp/src"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf -) | tar -C "$tmp/src" -xf - || fail "copying the source tree"
else
  (cd "$src" && tar --exclude='./build*' --exclude=./.git -cf - .) | tar -C "$tmp/src" -xf - || fail "copying the source tree"
fi
echo "ok: copied the source tree"

cmake -S "$tmp/src" -B "$tmp/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" \
  -DSTEPC_SANITIZE="$sanitize" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configure"; }
cmake --build "$tmp/build" --target stepc >"$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; fail "build"; }
cmake --install "$tmp/build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "install"; }
p=$tmp/prefix
for f in bin/stepc lib/stepc/libstepc_rt.a lib/stepc/libstepc_ir.a include/stepc.h share/stepc/models/tiny.lua; do
  [ -f "$p/$f" ] || fail "the install has no $f"
done
[ -e "$p/bin/stepc-layout.txt" ] && fail "the build tree's layout file was installed"
rm -rf "$tmp/src" "$tmp/build"
# (AddressSanitizer's metadata names each object's source file by its full path: a name, never opened)
[ "$sanitize" = ON ] || ! grep -q -F -e "$tmp/src" -e "$tmp/build" "$p/bin/stepc" ||
  fail "the installed stepc names a path of its source or build tree"
echo "ok: installed; the source and build trees are gone"

# Away from any models/ folder, with a clean environment.
mkdir "$tmp/work" "$tmp/home" && cd "$tmp/work" || fail "mkdir"
run() { env -i PATH=/usr/bin:/bin HOME="$tmp/home" "$@"; }
tiny=$p/share/stepc/models/tiny.lua
run "$p/bin/stepc" check "$tiny" >check.out 2>&1 || { cat check.out; fail "stepc check the installed tiny.lua"; }
printf 'local cfg = stepc.recipe("tiny")\ncfg.model.num_layers = 2\nreturn cfg\n' >mine.lua
run "$p/bin/stepc" check mine.lua >mine.out 2>&1 || { cat mine.out; fail "stepc check a recipe that names the installed tiny"; }
echo "ok: stepc check finds the installed recipes"

run "$p/bin/stepc" build "$tiny" -o art >build.out 2>&1 || { cat build.out; fail "stepc build"; }
run ./art/train --device cpu --steps 2 >train.out 2>&1 || { cat train.out; fail "art/train"; }
grep -q "step *2 " train.out || { cat train.out; fail "art/train ran no second step"; }
echo "ok: stepc build, and the artifact trains"

run "$p/bin/stepc" run "$tiny" --device cpu --steps 2 >run.out 2>&1 || { cat run.out; fail "stepc run"; }
grep -q "step *2 " run.out && grep -q "$tmp/home/.cache/stepc/artifacts/" run.out || { cat run.out; fail "stepc run's output"; }
echo "ok: stepc run SPEC builds into the cache and trains"
