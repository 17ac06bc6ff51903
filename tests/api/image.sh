#!/usr/bin/env bash
# tests/api/image.sh STEPC TEST_IMAGE — a re-signed step image with one fact edited is refused at
# open, naming the field (tests/api/test_image.c), on a one-layer artifact built here.
set -euo pipefail
stepc=$1 test_image=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$stepc" build tests/recipes/gpt3_tiny.lua model.num_layers=1 -o "$tmp/a" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$test_image" "$tmp/a"
