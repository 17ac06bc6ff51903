#!/usr/bin/env bash
# run_on_gpu.sh — the GPU kernel tests and flash-attention timings, on a machine with a GPU.
#   tests/gpu/run_on_gpu.sh [gpu_kernels options: --no-bench | --bench-only | --only basic|attention]
# Uses the gpu_kernels binary of an existing build (build/, or $BUILD); builds one first if there
# is none (that needs Lua 5.4 headers, which the GPU machine lacks: build here and carry build/).
# Writes the log to $OUT/gpu_kernels.log when OUT is set, else to ./gpu_kernels.log. NVRTC's cubin
# cache goes beside the log. Exit status: gpu_kernels's (0 pass, 1 fail, 77 no GPU).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BIN=$BUILD/tests/gpu/gpu_kernels
DEST=${OUT:-.}
mkdir -p "$DEST"
LOG=$DEST/gpu_kernels.log
if [ ! -x "$BIN" ]; then
  echo "no $BIN: building" | tee "$LOG"
  cmake -S . -B "$BUILD" -G Ninja >/dev/null && ninja -C "$BUILD" gpu_kernels || { echo "build failed" | tee -a "$LOG"; exit 1; }
fi
{
  echo "== $(date -u +%FT%TZ) $(hostname) commit ${STEPC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv 2>/dev/null
} >>"$LOG"
"$BIN" --cache "$DEST/nvrtc-cache" "$@" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
echo "== exit $rc" | tee -a "$LOG"
exit "$rc"
