#!/usr/bin/env bash
# Checks that the README and docs/ tell the truth about the tree, after a build in build/:
#   - every path they name under scripts/, build/, examples/ or docs/ exists;
#   - every --flag on a line that runs qjit-tune (or scripts/tune.sh) is one qjit-tune accepts;
#   - the package list in docs/building.md is scripts/debian-packages.txt, in the same order;
#   - the README stays short (at most 250 lines).
# Prints each problem with its file and line; exits 1 if there is any.
# Usage: scripts/check_docs.sh            (run scripts/build.sh build or scripts/tune.sh first)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
shopt -s nullglob
pages=(README.md docs/*.md)
problems=0
problem() { echo "check_docs: $*" >&2; problems=$((problems + 1)); }

# Paths: a name starting with one of the four folders, not part of a longer word or path
# (build-sanitize/ and $build/ are not build/). Trailing sentence punctuation is not part of it.
while IFS=: read -r page line path; do
  path="${path%%[.,;:]}"
  [ -e "$path" ] || problem "$page:$line names $path, which does not exist"
done < <(grep -noP '(?<![\w$/.~-])(scripts|build|examples|docs)/[\w./+-]*' "${pages[@]}" | sed 's/\.*$//')

# qjit-tune's flags, as its --help lists them.
tune="build/tools/qjit-tune"
if [ -x "$tune" ]; then
  accepted="$("$tune" --help | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u)"
  while IFS=: read -r page line text; do
    for flag in $(grep -oE -- '(^|[^a-zA-Z0-9-])--[a-z][a-z0-9-]*' <<<"$text" | grep -oE -- '--[a-z][a-z0-9-]*'); do
      grep -qxF -- "$flag" <<<"$accepted" || problem "$page:$line gives qjit-tune $flag, which it does not accept"
    done
  done < <(grep -nE 'qjit-tune|scripts/tune\.sh' "${pages[@]}" | grep -E -- '--[a-z]')
else
  problem "$tune is not built (run scripts/tune.sh --help or scripts/build.sh build first)"
fi

# The package list: the fenced block right after the marker line in docs/building.md.
marker='<!-- packages: scripts/debian-packages.txt -->'
listed="$(awk -v marker="$marker" '$0 == marker {found = 1; next}
                                   found == 1 && /^```/ {found = 2; next}
                                   found == 2 && /^```/ {exit}
                                   found == 2 {print $1}' docs/building.md 2>/dev/null || true)"
wanted="$(grep -Ev '^[[:space:]]*(#|$)' scripts/debian-packages.txt)"
if [ -z "$listed" ]; then
  problem "docs/building.md has no package list after the line $marker"
elif [ "$listed" != "$wanted" ]; then
  problem "docs/building.md lists other packages than scripts/debian-packages.txt:"
  diff <(echo "$listed") <(echo "$wanted") >&2 || true
fi

lines="$(wc -l <README.md)"
[ "$lines" -le 250 ] || problem "README.md has $lines lines (at most 250: topics belong in docs/)"

[ "$problems" -eq 0 ] || { echo "check_docs: $problems problem(s)" >&2; exit 1; }
echo "check_docs: ${#pages[@]} pages name only existing paths, qjit-tune flags and packages"
