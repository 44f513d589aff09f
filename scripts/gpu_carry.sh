#!/usr/bin/env bash
# Run where qjit was built, before carrying the build folder to a GPU machine: copies the shared
# libraries that its programs need and that a machine with only the CUDA toolkit lacks (yaml-cpp,
# gtest, benchmark, ...) into BUILD_DIR/carried-libs, which scripts/gpu_bench.sh puts on
# LD_LIBRARY_PATH there.
# Usage: scripts/gpu_carry.sh [BUILD_DIR]   (default: build)
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
dest="$build/carried-libs"
# The C and C++ runtimes and the CUDA libraries come from the GPU machine itself; libqjit travels
# with the build folder.
skip='^(libqjit\.|linux-vdso|ld-linux|libc\.|libm\.|libstdc\+\+|libgcc_s|libpthread|libdl\.|librt\.|libcuda\.|libcudart|libcublas|libnvrtc)'

binaries=()
for binary in "$build/bench/bench_cuda" "$build/tests/qjit_tests" "$build/libqjit.so"; do
  if [ -e "$binary" ]; then binaries+=("$binary"); else echo "gpu_carry: $binary not built, skipped" >&2; fi
done
[ ${#binaries[@]} -gt 0 ] || { echo "gpu_carry: nothing built in $build" >&2; exit 1; }

mkdir -p "$dest"
# "name => /path (address)" lines only: a library the loader could not find has no path.
for binary in "${binaries[@]}"; do ldd "$binary"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    cp -L "$path" "$dest/$name"
    echo "gpu_carry: $name <- $path"
  done
