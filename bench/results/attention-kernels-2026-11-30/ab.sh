#!/usr/bin/env bash
# The A/B of this page: bench_ops and qjit-run's 512-token prompt, the build before the attention
# changes (OLD, a worktree of aedfd4e built into its own folder) against the one after (NEW),
# alternated, each qjit-run with a tuning database of its own, emptied first.
# Usage: ab.sh OLD_BUILD NEW_BUILD MODEL.gguf
set -euo pipefail
old=$1 new=$2 model=$3
for round in 1 2; do
  for v in old new; do
    build=$([ $v = old ] && echo "$old" || echo "$new")
    "$build/bench/bench_ops" --threads 1,2 --positions 512 --repeats 9 > "bench_ops-$v-$round.md"
  done
done
rm -f /tmp/db-old.yaml /tmp/db-new.yaml
for round in 1 2 3; do
  for kv in f32 f16 int8; do
    for threads in 1 2; do
      for v in old new; do
        build=$([ $v = old ] && echo "$old" || echo "$new")
        rate=$(QJIT_TUNING_DB=/tmp/db-$v.yaml "$build/tools/qjit-run" --model "$model" --prompt-bench 512 \
               --threads "$threads" --kv-cache "$kv" 2>&1 | awk '/^prompt/ {print $4}')
        echo "$v $kv $threads $rate"
      done
    done
  done
done > whole-model-prompts.txt
