#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] — builds the fuzzers with clang (libFuzzer + ASan + UBSan) — the recipe
# frontend, the files a runtime reads, the rendezvous' messages — and runs each for a bounded time from
# its seed corpus. A crash fails the run; copy the crash-* file it names into tests/fuzz/regressions/
# (files/, hello/ for the others) so that the replay tests keep it.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
CC=clang cmake -S . -B build-fuzz -G Ninja -DSTEPC_FUZZ=ON -DSTEPC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-fuzz fuzz_frontend fuzz_files fuzz_hello fuzz_tool_files
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
# fuzz_more TARGET SEEDS SECONDS MAX_LEN TIMEOUT WHAT: one more fuzzer from its seeds, for a bounded time
fuzz_more() {
  mkdir -p "build-fuzz/corpus-$1"
  cp -n "tests/fuzz/$2"/* "build-fuzz/corpus-$1"/ 2>/dev/null || true
  echo "fuzzing $6 for $3s" >&2
  "build-fuzz/tests/fuzz/$1" "build-fuzz/corpus-$1" -max_total_time="$3" -max_len="$4" -timeout="$5" -rss_limit_mb=2048 \
    -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 2>"build-fuzz/$1.log" || {
    tail -n 40 "build-fuzz/$1.log" >&2
    echo "fuzz: a crash was found in $6; see build-fuzz/artifacts/ (save it under tests/fuzz/$2/)" >&2
    exit 1
  }
  echo "fuzz: no crash in $6 in $3s" >&2
}
# the files a runtime reads (safetensors, step images): a third of the time again. Step images are
# up to ~230 KB (the seeds are whole images), and an input may run a CPU step of a mutated but
# valid image under ASan: hence the larger max_len and timeout
fuzz_more fuzz_files files $(( (secs + 2) / 3 )) 262144 30 "safetensors, state.json and step images"
# the rendezvous' messages (what a stranger at MASTER_PORT can send): a sixth of the time again
fuzz_more fuzz_hello hello $(( (secs + 5) / 6 )) 1024 10 "the rendezvous' hello, challenge and welcome"
# the small files of other tools and earlier runs (config.json, JSON, cache manifests, libstep.sum):
# a sixth of the time again
fuzz_more fuzz_tool_files tool $(( (secs + 5) / 6 )) 8192 10 "config.json, JSON objects, cache manifests and libstep.sum"
