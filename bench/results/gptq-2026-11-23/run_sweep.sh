#!/bin/bash
# The sweep behind stories_accuracy.jsonl (README.md in this folder), one run at a
# time, each appending one JSON line. From the repository root, after a Release build with
# -DQJIT_BUILD_BENCH=ON:  RUNNER=build/bench/stories_runner OUT=out.jsonl bench/results/gptq-2026-11-23/run_sweep.sh
R=${RUNNER:-build/bench/stories_runner}
OUT=${OUT:-stories_accuracy.jsonl}
: > $OUT
run() { echo "== $*" >&2; $R "$@" --json >> $OUT || echo "FAILED: $*" >&2; }
run --method fp32
for cls in --fp32-classifier ""; do
  for b in 4 3 2; do
    run --method rtn --bits $b --group 32 $cls
    run --method gptq --bits $b --group 32 $cls
    run --method gptq --bits $b --group 32 --act-order $cls
  done
done
C=--fp32-classifier
run --method mixed --group 32 --alpha 0.25 --outliers 0.002 $C
run --method mixed --group 32 --alpha 0.25 --outliers 0.002 --act-order $C
run --method mixed --group 32 --alpha 0.25 --outliers 0 $C
run --method mixed --group 32 --alpha 0.25 --outliers 0.002 --no-calibration $C
run --method mixed --group 32 --alpha 0 --outliers 0.002 $C
run --method mixed --group 32 --alpha 0.25 --outliers 0.002 --isa portable $C
run --method mixed --group 32 --alpha 0.25 --outliers 0.002
# How much GPTQ owes to its calibration sample: two more disjoint samples of 256 paragraphs.
for start in 1000 1600; do
  run --method gptq --bits 3 --group 32 --act-order --calibration-start $start $C
  run --method gptq --bits 4 --group 32 --act-order --calibration-start $start $C
done
echo done >&2
