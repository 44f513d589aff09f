#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds qjit.
usage() {
  cat <<'TEXT'
Usage: scripts/build.sh BUILD_DIR [extra cmake arguments...]

Configures qjit (Release) in BUILD_DIR and builds it, after installing any missing Debian packages.
Examples:
  scripts/build.sh build                                      library, qjit-tune, tests, benchmarks
  scripts/build.sh build-lib -DQJIT_BUILD_TESTS=OFF -DQJIT_BUILD_BENCH=OFF    library and qjit-tune only
  scripts/build.sh build-san -DQJIT_SANITIZE=ON               under ASan + UBSan
TEXT
}
set -euo pipefail
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  usage
  [ $# -ge 1 ] && exit 0 || exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$1"
shift
"$root/scripts/setup.sh"
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
