#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] — builds the frontend fuzzer with clang (libFuzzer + ASan + UBSan) and
# runs it for a bounded time from the seed corpus. A crash fails the run; copy the crash-* file it
# names into tests/fuzz/regressions/ so that fuzz.replay keeps it as a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
CC=clang cmake -S . -B build-fuzz -G Ninja -DSTEPC_FUZZ=ON -DSTEPC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-fuzz fuzz_frontend fuzz_files
work=build-fuzz/corpus
mkdir -p "$work" build-fuzz/artifacts
cp -n tests/fuzz/seeds/* "$work"/ 2>/dev/null || true
echo "fuzzing the recipe frontend for ${secs}s" >&2
build-fuzz/tests/fuzz/fuzz_frontend "$work" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 2>build-fuzz/fuzz.log || {
  tail -n 40 build-fuzz/fuzz.log >&2
  echo "fuzz: a crash was found; see build-fuzz/artifacts/" >&2
  exit 1
}
grep -E "stat::number_of_executed_units|Done" build-fuzz/fuzz.log >&2 || true
echo "fuzz: no crash in ${secs}s" >&2
# the files a runtime reads (safetensors, step images): a third of the time again. Step images are
# up to ~230 KB (the seeds are whole images), and an input may run a CPU step of a mutated but
# valid image under ASan: hence the larger -max_len and -timeout
fsecs=$(( (secs + 2) / 3 ))
mkdir -p build-fuzz/corpus-files
cp -n tests/fuzz/files/* build-fuzz/corpus-files/ 2>/dev/null || true
echo "fuzzing safetensors, state.json and step images for ${fsecs}s" >&2
build-fuzz/tests/fuzz/fuzz_files build-fuzz/corpus-files -max_total_time="$fsecs" -max_len=262144 -timeout=30 -rss_limit_mb=2048 \
  -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 2>build-fuzz/fuzz-files.log || {
  tail -n 40 build-fuzz/fuzz-files.log >&2
  echo "fuzz: a crash was found in the file readers; see build-fuzz/artifacts/ (save it under tests/fuzz/files/)" >&2
  exit 1
}
echo "fuzz: no crash in the file readers in ${fsecs}s" >&2
