#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in build-fuzz/, the library instrumented with ASan and
# UBSan) and runs each for SECONDS (default 30) on a scratch copy of its seed corpus
# (tests/fuzz/corpus/<target>), then prints each target's executions and rate.
# A finding (crash, sanitizer report, leak, uncaught exception) stops the run with the input saved
# as build-fuzz/findings/<target>/crash-*; reproduce with build-fuzz/tests/fuzz/<target> FILE.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]        long runs: scripts/fuzz.sh 3600 fuzz_checkpoint
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-30}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_layer_file fuzz_layer_file_checksummed fuzz_tuning_db fuzz_model_config
                                     fuzz_safetensors fuzz_gguf fuzz_checkpoint fuzz_gptq_tensors fuzz_tp_mlp_file
                                     fuzz_neuron_file fuzz_neuron_file_checksummed fuzz_pack_file)
build="$root/build-fuzz"
"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DQJIT_FUZZ=ON -DQJIT_BUILD_TESTS=OFF -DQJIT_BUILD_BENCH=OFF -DQJIT_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >/dev/null
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for target in "${targets[@]}"; do
  corpus="$(mktemp -d)"
  findings="$build/findings/$target"
  mkdir -p "$findings"
  cp "$root/tests/fuzz/corpus/$target/"* "$corpus/"
  log="$build/findings/$target.log"
  if ! "$build/tests/fuzz/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$findings/" "$corpus" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $target found a problem; the input is in $findings" >&2
    rm -rf "$corpus"
    exit 1
  fi
  runs="$(awk '/stat::number_of_executed_units/ {print $2}' "$log")"
  echo "fuzz: $target: $runs executions in ${seconds} s ($((runs / seconds))/s), corpus $(ls "$corpus" | wc -l) inputs"
  rm -rf "$corpus"
done
