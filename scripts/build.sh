#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds qjit.
usage() {
  cat <<'TEXT'
Usage: scripts/build.sh [--quiet] [--target TARGET]... BUILD_DIR [extra cmake arguments...]

Configures qjit (Release) in BUILD_DIR and builds it, after installing any missing Debian packages
(scripts/debian-packages.txt).
  --quiet          write the configure and build output to BUILD_DIR/build.log instead; a failure
                   prints the log's last lines and its path
  --target TARGET  build only TARGET (e.g. qjit-tune); may be repeated
Examples:
  scripts/build.sh build                                      library, qjit-tune, tests, benchmarks
  scripts/build.sh build-lib -DQJIT_BUILD_TESTS=OFF -DQJIT_BUILD_BENCH=OFF    library and qjit-tune only
  scripts/build.sh build-san -DQJIT_SANITIZE=ON               under ASan + UBSan
TEXT
}
set -euo pipefail
quiet=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --quiet) quiet=1; shift ;;
    --target) [ $# -ge 2 ] || { usage >&2; exit 2; }; targets+=(--target "$2"); shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$1"
shift
"$root/scripts/setup.sh"

configure_and_build() {
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@"
  cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
}

if [ "$quiet" -eq 0 ]; then
  configure_and_build "$@"
  exit 0
fi
mkdir -p "$build_dir"
log="$(cd "$build_dir" && pwd)/build.log"
if ! configure_and_build "$@" >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "build: failed; the whole log is $log" >&2
  exit 1
fi
