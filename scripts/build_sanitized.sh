#!/usr/bin/env bash
# Builds qjit with clang under AddressSanitizer + UndefinedBehaviorSanitizer (-fsanitize=enum
# included) in build-sanitize/: the library instrumented for libFuzzer's coverage too, so that one
# build serves both the test suite under the sanitizers (QJIT_SANITIZE=1 scripts/test.sh) and the
# fuzz targets (scripts/fuzz.sh).
# Usage: scripts/build_sanitized.sh [--target TARGET]...      (default: everything but the benchmarks)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$root/scripts/build.sh" --quiet "$@" "$root/build-sanitize" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
     -DQJIT_SANITIZE=ON -DQJIT_FUZZ=ON -DQJIT_BUILD_BENCH=OFF
