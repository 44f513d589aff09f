#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with a build folder built elsewhere and carried
# here after scripts/gpu_carry.sh: the CUDA tests, then bench_cuda with this script's arguments.
# Usage: [QJIT_BUILD_DIR=build] [OUT=folder] scripts/gpu_bench.sh [bench_cuda flags...]
# With OUT set, the outputs are also written to $OUT/ctest_cuda.log and $OUT/bench_cuda.md.
# Exits nonzero when the tests or the benchmark fail (the benchmark runs either way).
set -euo pipefail
build="$(cd "${QJIT_BUILD_DIR:-build}" && pwd)"
export LD_LIBRARY_PATH="$build:$build/carried-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The build folder records absolute paths (ctest's test list, the tests' source folder): where it
# was built under another root, make that root point at this checkout.
recorded_root="$(sed -n 's/^qjit_SOURCE_DIR:STATIC=//p' "$build/CMakeCache.txt")"
if [ -n "$recorded_root" ] && [ ! -e "$recorded_root" ]; then
  mkdir -p "$(dirname "$recorded_root")" && ln -s "$PWD" "$recorded_root" ||
    echo "gpu_bench: warning: cannot link $recorded_root to $PWD; ctest may not find the tests" >&2
fi

if ldd "$build/bench/bench_cuda" | grep 'not found'; then
  echo "gpu_bench: missing shared libraries above (CUDA ones must come from this machine's toolkit;" \
       "others from scripts/gpu_carry.sh run where it was built)" >&2
fi

# Runs "$@", copying its output to $OUT/$1 when OUT is set.
logged() {
  local name="$1"
  shift
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    "$@" 2>&1 | tee "$OUT/$name"
  else
    "$@"
  fi
}

status=0
# The compile-only sweep (label cuda_sweep) is left out: the device tests compile every variant anyway.
logged ctest_cuda.log ctest --test-dir "$build" -R Cuda -LE cuda_sweep --timeout "${QJIT_TEST_TIMEOUT:-900}" \
  --no-tests=error --output-on-failure || status=$?
logged bench_cuda.md "$build/bench/bench_cuda" "$@" || status=$?
exit "$status"
