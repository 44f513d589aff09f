#!/usr/bin/env bash
# Builds qjit and runs the whole test suite. QJIT_SANITIZE=1 builds and runs it under
# AddressSanitizer + UndefinedBehaviorSanitizer instead (in build-sanitize/).
# The full NVRTC sweep of every CUDA variant (label cuda_sweep) is left out; run it with
#   ctest --test-dir build -L cuda_sweep -j 2
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${QJIT_SANITIZE:-0}" = 1 ]; then
  build_dir="$root/build-sanitize"
  "$root/scripts/build.sh" "$build_dir" -DQJIT_SANITIZE=ON -DQJIT_BUILD_BENCH=ON >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  build_dir="$root/build"
  "$root/scripts/build.sh" "$build_dir" >/dev/null
fi
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" -LE cuda_sweep
