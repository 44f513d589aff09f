#!/usr/bin/env bash
# Builds qjit and runs qjit-tune (no arguments: Llama-2-7B layer shapes, 4-bit, group 128).
# Arguments are passed to qjit-tune; see scripts/tune.sh --help.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh" "$root/build" >/dev/null
exec "$root/build/tuner/qjit-tune" "$@"
