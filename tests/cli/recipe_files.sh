#!/usr/bin/env bash
# recipe_files.sh STEPC — which files a recipe is read from (compiler/frontend/readfile.c):
# stepc.recipe(name) never follows a symbolic link in a recipe folder (a link to a secret file must
# not be run as Lua and shown in an error) and never waits on a FIFO; the recipe named on the
# command line may be a link (the user chose it) but a FIFO or a device is refused at once.
set -uo pipefail
stepc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() { # code text args... (! text: must not appear)
  local code=$1 text=$2
  shift 2
  local out rc
  out=$(timeout 20 "$stepc" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$text" <<<"$out" || grep -qF SECRET_TOKEN_123 <<<"$out"; then
    echo "FAIL: stepc $* -> exit $rc (want $code and '$text'), output:"; echo "$out" | head -5; fails=1
  else echo "ok: stepc $* -> $code: $text"; fi
}
mkdir "$tmp/r"
echo 'token SECRET_TOKEN_123' >"$tmp/secret.toml"
ln -s ../secret.toml "$tmp/r/link.lua"
echo 'return stepc.recipe("link")' >"$tmp/r/uses_link.lua"
expect 2 "stepc.recipe: refusing $tmp/r/link.lua: a symbolic link" check "$tmp/r/uses_link.lua"
mkfifo "$tmp/r/fifo.lua"
echo 'return stepc.recipe("fifo")' >"$tmp/r/uses_fifo.lua"
expect 2 "refusing $tmp/r/fifo.lua: not a regular file (a FIFO)" check "$tmp/r/uses_fifo.lua"
expect 2 "cannot open the recipe file: not a regular file (a FIFO)" check "$tmp/r/fifo.lua"
expect 2 "cannot open the recipe file: not a regular file (a device)" check /dev/zero
ln -s "$PWD/models/tiny.lua" "$tmp/mine.lua"
expect 0 "ok" check "$tmp/mine.lua"
exit $fails
