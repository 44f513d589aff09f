#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in build-sanitize/, scripts/build_sanitized.sh: the
# library instrumented with ASan and UBSan, the build QJIT_SANITIZE=1 scripts/test.sh shares) and
# runs each for SECONDS (default 30) on a scratch copy of its seeds (tests/fuzz/seeds/<target>: valid
# files and named regressions, which tests also read) and its grown corpus (tests/fuzz/corpus/<target>),
# then prints each target's executions and rate.
# A finding (crash, sanitizer report, leak, uncaught exception) stops the run with the input saved
# as build-sanitize/findings/<target>/crash-*; reproduce with build-sanitize/tests/fuzz/<target> FILE.
# With --merge, what the run found is merged into the target's grown corpus in the repository
# (libFuzzer's -merge=1: the fewest inputs that cover every feature the seeds do not), so that later
# runs and CI start from it; the seeds stay as they are.
# Usage: scripts/fuzz.sh [--merge] [SECONDS] [TARGET...]     long runs: scripts/fuzz.sh --merge 3600 fuzz_checkpoint
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
merge=0
if [ "${1:-}" = --merge ]; then merge=1; shift; fi
seconds="${1:-30}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_layer_file fuzz_layer_file_checksummed fuzz_tuning_db fuzz_model_config
                                     fuzz_safetensors fuzz_gguf fuzz_checkpoint fuzz_gptq_tensors fuzz_tp_mlp_file
                                     fuzz_neuron_file fuzz_neuron_file_checksummed fuzz_pack_file fuzz_json_document
                                     fuzz_tokenizer)
build="$root/build-sanitize"
target_flags=()
for target in "${targets[@]}"; do target_flags+=(--target "$target"); done
"$root/scripts/build_sanitized.sh" "${target_flags[@]}"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for target in "${targets[@]}"; do
  corpus="$(mktemp -d)"
  findings="$build/findings/$target"
  mkdir -p "$findings"
  seeds="$root/tests/fuzz/seeds/$target"
  grown="$root/tests/fuzz/corpus/$target"
  cp -r "$seeds/." "$corpus/"
  [ ! -d "$grown" ] || cp -r "$grown/." "$corpus/"
  log="$build/findings/$target.log"
  # The target's dictionary (tests/fuzz/dict/: field names, tokens), shared by a checksummed twin.
  dict="$root/tests/fuzz/dict/${target#fuzz_}"
  dict="${dict%_checksummed}.dict"
  dict_flag=()
  [ -f "$dict" ] && dict_flag=(-dict="$dict")
  if ! "$build/tests/fuzz/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
       "${dict_flag[@]}" -artifact_prefix="$findings/" "$corpus" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $target found a problem; the input is in $findings" >&2
    rm -rf "$corpus"
    exit 1
  fi
  runs="$(awk '/stat::number_of_executed_units/ {print $2}' "$log")"
  # Coverage growth: the edges covered once the corpus has run, and at the end.
  first="$(awk '/INITED/ {for (i = 1; i < NF; ++i) if ($i == "cov:") print $(i + 1)}' "$log" | head -n1)"
  last="$(awk '/ cov: / {for (i = 1; i < NF; ++i) if ($i == "cov:") c = $(i + 1)} END {print c}' "$log")"
  echo "fuzz: $target: $runs executions in ${seconds} s ($((runs / seconds))/s), coverage ${first:-?} -> ${last:-?} edges," \
       "corpus $(ls "$corpus" | wc -l) inputs"
  if [ "$merge" -eq 1 ]; then
    # The merge keeps what the first folder already covers, so it starts from the seeds, which then
    # leave: the grown corpus holds only what they miss.
    merged="$(mktemp -d)"
    cp -r "$seeds/." "$merged/"
    "$build/tests/fuzz/$target" -merge=1 -rss_limit_mb=2048 -timeout=10 "$merged" "$corpus" >"$log.merge" 2>&1
    for seed in "$seeds/"*; do rm -f "$merged/$(basename "$seed")"; done
    rm -rf "$grown"
    mv "$merged" "$grown"
    echo "fuzz: $target: grown corpus in the repository now $(ls "$grown" | wc -l) inputs"
  fi
  rm -rf "$corpus"
done
