#!/usr/bin/env bash
# CI for the wheel: builds it as the README says (scripts/build_wheel.sh), installs it into a fresh
# virtual environment with pip alone, checks that every shared library the installed package loads
# is the C or C++ runtime or one the wheel carries, then runs the README's Python example there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/build_wheel.sh dist
venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet dist/qjit-*.whl
package="$("$venv/bin/python" -c 'import os, qjit; print(os.path.dirname(qjit.__file__))')"
runtime='^(linux-vdso|ld-linux|libc\.|libm\.|libstdc\+\+|libgcc_s|libpthread|libdl\.|librt\.)'
for binary in "$package"/_native*.so "$package"/libqjit.so "$package"/bin/qjit-tune; do
  outside="$(ldd "$binary" | awk '{n = split($1, name, "/"); print name[n], $3}' | grep -Ev "$runtime" | grep -v " $(dirname "$package")/" || true)"
  if [ -n "$outside" ]; then
    echo "check_wheel: $binary loads libraries the wheel does not carry:" >&2
    echo "$outside" >&2
    exit 1
  fi
done
echo "check_wheel: the README's Python example in a fresh venv with the wheel"
awk '/^## / {in_section = ($0 == "## Python")}
     in_section && /^```python$/ && !done {in_block = 1; next}
     in_block && /^```$/ {in_block = 0; done = 1}
     in_block' README.md | (cd "$venv" && "$venv/bin/python" -)
"$venv/bin/qjit-tune" --help > /dev/null
echo "check_wheel: $(ls dist/qjit-*.whl) installs and runs"
