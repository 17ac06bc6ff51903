#!/usr/bin/env bash
# scripts/dev.sh run | test | build — the README's two quick-start commands and CI's entry point.
#   run   installs what is missing, builds, and runs the main job on the default recipe
#         (check, plan and sweep llama3_2_1b; train it on the GPU when there is one)
#   test  installs what is missing, builds (plain and with ASan+UBSan), runs the whole test suite
#         under ctest, and fuzzes the recipe frontend for a bounded time
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v gcc >/dev/null || missing+=(gcc)
  command -v g++ >/dev/null || missing+=(g++) # tests/simt: the device kernels compiled as C++ for the CPU
  command -v clang >/dev/null || missing+=(clang)
  command -v clang-format >/dev/null || missing+=(clang-format)
  [ -f /usr/include/lua5.4/lua.h ] && [ -f /usr/lib/x86_64-linux-gnu/liblua5.4.a ] || missing+=(liblua5.4-dev)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || missing+=(libclang-rt-14-dev)
  command -v python3 >/dev/null || missing+=(python3)
  # tests/python needs numpy; Debian's is /usr/bin/python3's (tests/python/CMakeLists.txt finds it)
  python3 -c 'import numpy' 2>/dev/null || /usr/bin/python3 -c 'import numpy' 2>/dev/null || missing+=(python3-numpy)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if [ ! -d /usr/local/cuda ]; then
    echo "stepc needs the CUDA toolkit at /usr/local/cuda (nvrtc, cuBLASLt headers)" >&2
    exit 1
  fi
}

# PyTorch (PyPI) in a venv under build/, for the comparisons with an independent PyTorch model that
# run on the CPU (ctest torch_ref.cpu: tests/gpu/run_torch_ref.sh finds $BUILD/torch-venv). Best
# effort: without it (no network, no venv module) those tests skip, and say so.
torch_env() {
  local v=build/torch-venv
  if [ -x $v/bin/python ] && $v/bin/python -c 'import torch' 2>/dev/null; then return 0; fi
  if python3 -m venv $v >/dev/null 2>&1 && timeout 900 $v/bin/pip install -q "torch==${STEPC_TORCH_VERSION:-2.15.0}" >/dev/null 2>&1; then
    echo "PyTorch installed in $v (torch_ref.cpu)" >&2
  else
    echo "PyTorch could not be installed in $v: torch_ref.cpu will skip" >&2
  fi
}

build() { # build DIR [cmake options...]
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  ninja -C "$dir"
}

case "${1:-run}" in
build)
  need_pkgs
  build build
  ;;
run)
  need_pkgs
  build build
  build/stepc check models/llama3_2_1b.lua
  build/stepc plan models/llama3_2_1b.lua
  build/stepc sweep models/llama3_2_1b.lua
  if [ -e /dev/nvidia0 ] || command -v nvidia-smi >/dev/null 2>&1; then
    build/stepc run models/llama3_2_1b.lua --device cuda --steps 20
  else
    echo "no GPU here: skipping 'stepc run models/llama3_2_1b.lua --device cuda' (try --device cpu on models/tiny.lua)"
  fi
  ;;
test)
  need_pkgs
  build build
  torch_env
  ctest --test-dir build --output-on-failure -j2
  build build-asan -DSTEPC_SANITIZE=ON
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j2
  if [ -x tests/fuzz/run.sh ]; then tests/fuzz/run.sh "${STEPC_FUZZ_SECONDS:-60}"; fi
  ;;
*)
  echo "usage: scripts/dev.sh run|test|build" >&2
  exit 3
  ;;
esac
