#!/usr/bin/env bash
# Installs a built qjit into a scratch prefix, then builds the C examples against it and runs the
# quickstart, twice: as strict C99 through pkg-config, and through find_package(qjit). The
# consumers are built with $CC (default cc): a sanitized build passes its own compiler and flags.
# Usage: scripts/check_install.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "$1" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
libdir="$scratch/prefix/lib"
[ -d "$libdir" ] || libdir="$(dirname "$(find "$scratch/prefix" -name 'libqjit.so' | head -n1)")"
soname="$(objdump -p "$libdir/libqjit.so" | awk '/SONAME/ {print $2}')"
[ "$soname" = "libqjit.so.0" ] || { echo "unexpected SONAME '$soname'" >&2; exit 1; }

export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
"${CC:-cc}" -std=c99 -Wall -Wextra -pedantic -Werror $(pkg-config --cflags qjit) "$root/examples/quickstart.c" \
   $(pkg-config --libs qjit) -o "$scratch/quickstart_c99" ${QJIT_CONSUMER_FLAGS:-}
LD_LIBRARY_PATH="$libdir" "$scratch/quickstart_c99" | grep -q "q4g128_asym_gemm"
"${CC:-cc}" -std=c99 -Wall -Wextra -pedantic -Werror $(pkg-config --cflags qjit) "$root/examples/run_checkpoint.c" \
   $(pkg-config --libs qjit) -o "$scratch/run_checkpoint_c99" ${QJIT_CONSUMER_FLAGS:-}

cmake -S "$root/examples" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
      -DCMAKE_C_FLAGS="${QJIT_CONSUMER_FLAGS:-}" -DCMAKE_EXE_LINKER_FLAGS="${QJIT_CONSUMER_FLAGS:-}" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
LD_LIBRARY_PATH="$libdir" "$scratch/consumer/quickstart" | grep -q "q4g128_asym_gemm"
echo "install check: SONAME $soname, pkg-config (C99) and find_package consumers run"
