#!/usr/bin/env bash
# Installs the Debian packages qjit needs to build, test and benchmark (scripts/debian-packages.txt).
# Idempotent: prints nothing and touches nothing when every package is present.
set -euo pipefail

mapfile -t packages < <(grep -Ev '^[[:space:]]*(#|$)' "$(dirname "${BASH_SOURCE[0]}")/debian-packages.txt")

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
