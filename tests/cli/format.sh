#!/usr/bin/env bash
# format.sh — the product's C files (compiler/, runtime/, ir/) follow .clang-format: clang-format
# changes nothing in them. Run `clang-format -i` on a file this names. Skips (77) where clang-format
# is not installed (scripts/dev.sh installs it; CI has it).
set -uo pipefail
cd "$(dirname "$0")/../.."
command -v clang-format >/dev/null || { echo "SKIP: no clang-format here"; exit 77; }
files=$(git ls-files 'compiler/*.c' 'compiler/*.h' 'runtime/*.c' 'runtime/*.h' 'ir/*.c' 'ir/*.h' 2>/dev/null)
[ -n "$files" ] || files=$(find compiler runtime ir -name '*.[ch]')
bad=0
for f in $files; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || { echo "FAIL $f is not formatted (clang-format -i $f)"; bad=$((bad + 1)); }
done
echo "format: $(wc -w <<<"$files") files, $bad not formatted"
[ $bad -eq 0 ]
