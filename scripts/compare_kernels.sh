#!/usr/bin/env bash
# Checks that two builds generate the same x86 machine code: runs the kernel suites of each
# build's qjit_tests with QJIT_DUMP_DIR set (every format, width, group, ISA, activation path and
# forced tiling they create), then compares the dumped kernels of the same name byte for byte.
# Tuned layers may pick other tilings from run to run, so only names both runs dumped are
# compared; the count is printed. Exits 1 if any kernel differs.
# Usage: scripts/compare_kernels.sh OLD_BUILD_DIR NEW_BUILD_DIR
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,7p' "${BASH_SOURCE[0]}" >&2; exit 2; }
suites='AllFormats/FormatTest.*:JitKernels.*:AllFeatures/MixedFormatTest.*:MixedFormat.*:LowRankLayer.*:Moe.*:SuperBlocks/*'
suites+=':-JitKernels.DumpSwitchWritesTheCode'
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for side in old new; do
  build="$1"; [ "$side" = new ] && build="$2"
  mkdir "$scratch/$side"
  QJIT_DUMP_DIR="$scratch/$side" "$build/tests/qjit_tests" --gtest_filter="$suites" >"$scratch/$side.log" 2>&1 ||
    { tail -n 20 "$scratch/$side.log" >&2; echo "compare_kernels: $build's tests failed" >&2; exit 1; }
done
same=0 differ=0
while read -r name; do
  if cmp -s "$scratch/old/$name" "$scratch/new/$name"; then same=$((same + 1))
  else differ=$((differ + 1)); echo "compare_kernels: $name differs" >&2; fi
done < <(comm -12 <(ls "$scratch/old") <(ls "$scratch/new"))
echo "compare_kernels: $same kernels identical, $differ differ" \
     "($(ls "$scratch/old" | wc -l) dumped by $1, $(ls "$scratch/new" | wc -l) by $2)"
[ "$differ" -eq 0 ]
