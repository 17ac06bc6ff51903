#!/usr/bin/env bash
# args.sh STEPC — the command line's grammar (compiler/cli/cli.c): per-verb help, --version, did-you-mean
# for verbs and options, an option of another verb refused with its verb, strict numbers, --opt=value,
# sizes with units, a directory or a missing file as SPEC. Each line: exit code, text expected.
set -uo pipefail
stepc=$1
fails=0
expect() { # code text args...
  local code=$1 text=$2
  shift 2
  local out rc
  out=$("$stepc" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: stepc $* -> exit $rc (want $code), output:"; echo "$out" | head -5; fails=1
  else echo "ok: stepc $* -> $code"; fi
}
expect 0 "usage: stepc run" run --help
expect 0 "usage: stepc plan" plan -h
expect 0 "usage: stepc build" help build
expect 3 "no verb 'bild'" help bild
expect 0 "stepc 0." --version
expect 0 "check   validate" help
expect 3 "did you mean 'plan'?" plna models/tiny.lua
expect 3 "--steps is an option of run, not of plan" plan models/tiny.lua --steps 3
expect 3 "did you mean --steps?" run models/tiny.lua --stesp=3
expect 3 "--steps wants a whole positive number (at most 1073741824), not 1x" run models/tiny.lua --steps 1x
expect 3 "--steps wants a whole positive number (at most 1073741824), not 2000000000" run models/tiny.lua --steps 2000000000
expect 3 "--device is cpu or cuda" run models/tiny.lua --device tpu
expect 3 "--gemm-tuning wants a whole number from 2 to 16, not 1" run models/tiny.lua --gemm-tuning 1
expect 3 "--gemm-tuning wants a whole number from 2 to 16, not 17" run models/tiny.lua --gemm-tuning=17
expect 3 "--gemm-tuning times cuBLASLt's algorithms: an option of --device cuda" run models/tiny.lua --device cpu --gemm-tuning 8
expect 3 "--gemm-tuning is an option of run, not of plan" plan models/tiny.lua --gemm-tuning 8
expect 3 "with its unit" sweep models/tiny.lua --budget 80
expect 3 "is a directory" plan models
expect 2 "No such file or directory" plan tests/cli/no_such_recipe.lua
expect 3 "-o needs a value" build models/tiny.lua -o
expect 3 "unexpected argument" check models/tiny.lua models/tiny.lua
expect 0 "\"ok\": true" check models/tiny.lua --json
expect 0 "did you mean core_attn?" sweep models/tiny.lua --candidates '[];core_atn'
# data.path: a FIFO is refused (never waited on), a directory too
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export STEPC_CACHE_DIR=$tmp/cache
mkfifo "$tmp/fifo"
expect 4 "is not a regular file (a FIFO)" run models/tiny.lua --device cpu --steps 1 "data.path=$tmp/fifo"
expect 4 "is not a regular file (a directory)" run models/tiny.lua --device cpu --steps 1 "data.path=$tmp"
exit $fails
