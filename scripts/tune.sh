#!/usr/bin/env bash
# Builds qjit-tune (in build/) and runs it (no arguments: Llama-2-7B layer shapes, 4-bit, group 128).
# Arguments are passed to qjit-tune; scripts/tune.sh --help lists them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh" --quiet --target qjit-tune "$root/build"
exec "$root/build/tools/qjit-tune" "$@"
