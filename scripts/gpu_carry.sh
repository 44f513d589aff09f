#!/usr/bin/env bash
# Run where qjit was built, before a GPU machine: makes BUILD_DIR-carry, the part of the build that
# scripts/gpu_bench.sh runs (libqjit, qjit_tests, bench_cuda, ctest's files; no object files, so it
# travels within the device tool's size limit), with the shared libraries that those programs need
# and that a machine with only the CUDA toolkit lacks (yaml-cpp, gtest, ...) in carried-libs/.
# Usage: scripts/gpu_carry.sh [BUILD_DIR]   (default: build; then name BUILD_DIR-carry in carry)
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
carry="$build-carry"
# The C and C++ runtimes and the CUDA libraries (NCCL too: 200 MiB, and in PyTorch's wheels there)
# come from the GPU machine itself.
skip='^(libqjit|linux-vdso|ld-linux|libc\.|libm\.|libstdc\+\+|libgcc_s|libpthread|libdl\.|librt\.|libcuda\.|libcudart|libcublas|libnvrtc|libnccl)'

binaries=()
for binary in bench/bench_cuda tests/qjit_tests tests/qjit_nccl_tests libqjit.so adapters/libqjit_nccl.so; do
  if [ -e "$build/$binary" ]; then binaries+=("$build/$binary"); else echo "gpu_carry: $binary not built, skipped" >&2; fi
done
[ ${#binaries[@]} -gt 0 ] || { echo "gpu_carry: nothing built in $build" >&2; exit 1; }

rm -rf "$carry"
mkdir -p "$carry/carried-libs"
# Everything but objects, archives and CMake's own work folders; other programs' folders stay out.
(cd "$build" && find . \( -name CMakeFiles -o -name models -o -name tools -o -name python -o -name _deps -o -name cuda_host_kernels -o -name peers -o -name pip -o -name Testing \) -prune \
   -o \( -type f -o -type l \) ! -name '*.o' ! -name '*.a' -print) |
  while read -r file; do
    mkdir -p "$carry/$(dirname "$file")"
    cp -P "$build/$file" "$carry/$file"
  done

# "name => /path (address)" lines only: a library the loader could not find has no path.
for binary in "${binaries[@]}"; do ldd "$binary"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    cp -L "$path" "$carry/carried-libs/$name"
  done
echo "gpu_carry: $carry ($(du -sh "$carry" | cut -f1)), libraries: $(ls "$carry/carried-libs" | tr '\n' ' ')"
