#!/usr/bin/env bash
# cache.sh STEPC — the artifact cache behind `stepc run SPEC` where no HOME, XDG_CACHE_HOME or
# STEPC_CACHE_DIR is set (cron, systemd, env -i): a directory of this user's in $TMPDIR, made 0700;
# a damaged entry (truncated libstep.so, missing step.img) is built again, not run and not kept;
# a cache directory another user could write, or a link, is refused (exit 4).
set -uo pipefail
stepc=$1
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
fails=0
uid=$(id -u)
cache=$tmp/stepc-$uid
run() { env -i PATH="$PATH" TMPDIR="$tmp" "$stepc" run models/tiny.lua --device cpu --steps 1 2>&1; }
expect() { # code text (output of the last run in $out, its code in $rc)
  if [ "$rc" -ne "$1" ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL: want exit $1 and '$2', got exit $rc:"; echo "$out" | tail -5; fails=1
  else echo "ok: $2"; fi
}
out=$(run); rc=$?
expect 0 "run: built the artifact in $cache/artifacts/"
mode=$(stat -c %a "$cache")
[ "$mode" = 700 ] && echo "ok: $cache is 0700" || { echo "FAIL: $cache has mode $mode"; fails=1; }
entry=$(ls -d "$cache"/artifacts/*/ | head -1)
# a truncated library is never loaded: the entry is built again
truncate -s 100 "$entry/libstep.so"
out=$(run); rc=$?
expect 0 "libstep.so does not match its checksum"
expect 0 "run: built the artifact in"
# a missing file likewise
rm "$entry/step.img"
out=$(run); rc=$?
expect 0 "step.img: No such file or directory"
[ -s "$entry/step.img" ] && echo "ok: step.img is back" || { echo "FAIL: step.img was not rebuilt"; fails=1; }
# the cache another user could write to: refused before anything is loaded from it
chmod 777 "$cache"
out=$(run); rc=$?
expect 4 "is writable by every user (mode 777)"
chmod 700 "$cache"
if [ "$uid" = 0 ]; then # another user's directory where ours belongs
  chown 65534 "$cache"
  out=$(run); rc=$?
  expect 4 "belongs to uid 65534, not to this user"
  chown 0 "$cache"
fi
mv "$cache" "$tmp/elsewhere"
ln -s "$tmp/elsewhere" "$cache"
out=$(run); rc=$?
expect 4 "is a symbolic link"
exit $fails
