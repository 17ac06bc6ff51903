#!/usr/bin/env bash
# GPU call (session 15): gpu_kernels basic (the embedding_backward_position argument fixed) and every
# other group; zero_ep's failing ranks' errors; then s13c (allgather EP, fp8 step tests).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
timeout 100 build/tests/gpu/gpu_kernels --no-bench --only basic > $OUT/kernels_all.txt 2>&1; echo "gpu_kernels all rc=$? $(grep -cE '^FAIL' $OUT/kernels_all.txt) FAIL; $(tail -1 $OUT/kernels_all.txt) at $(( $(date +%s) - t0 )) s"
grep -E '^FAIL|FATAL' $OUT/kernels_all.txt | head
mkdir -p $OUT/z
OUT=$OUT/z STEPS=3 timeout 200 tests/gpu/zero_ep.sh > $OUT/zero_ep.txt 2>&1; echo "zero_ep rc=$? at $(( $(date +%s) - t0 )) s"
grep -h "rank" $OUT/z/run_*.err | grep -v "exited\|job failed\|stopping" | sort | uniq -c | head -20
cd $OUT/z && tar czf ../zlogs.tgz . && cd - >/dev/null && rm -rf $OUT/z
[ -n "${SKIP_S13C:-}" ] || bash gpuwork/s13c.sh 2>&1 | tail -25
