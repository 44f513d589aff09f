#!/usr/bin/env bash
# Runs one gtest binary as SHARDS processes at once (gtest's own sharding), then prints every
# shard's summary and the failures, and writes the shards' outputs, one after another, in
# OUT_PREFIX.shards.log (also when stopped by a time limit: what ran so far). On a GPU machine the
# CUDA tests spend most of their time in NVRTC, one core per process: shards use the other cores.
# Usage: scripts/gpu_test_shards.sh SHARDS OUT_PREFIX BINARY [GTEST ARGS...]
set -uo pipefail
shards="$1" prefix="$2"
shift 2
logs="$(mktemp -d)"
pids=()

collect() {
  for (( index = 0; index < shards; index++ )); do
    [ -f "$logs/$index.log" ] || continue
    echo "-- shard $index: $(grep -E '^\[  PASSED  \]|tests ran|^\[  SKIPPED \] [0-9]' "$logs/$index.log" | tr '\n' ' ')"
    { echo "==== shard $index of $shards"; cat "$logs/$index.log"; } >> "$prefix.shards.log"
  done
  grep -h -E '^\[  FAILED  \]|Failure$' "$logs"/*.log | sort -u
  rm -rf "$logs"
}
trap 'kill "${pids[@]}" 2>/dev/null; echo "gpu_test_shards: stopped"; collect; exit 124' TERM INT

for (( index = 0; index < shards; index++ )); do
  GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$index" "$@" > "$logs/$index.log" 2>&1 &
  pids+=("$!")
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
collect
exit "$status"
