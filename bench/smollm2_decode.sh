#!/usr/bin/env bash
# Decode speed of SmolLM2-135M from its GGUF file: qjit-run (exact import) against llama.cpp's
# llama-bench (bench/peer_llama_cpp.sh) on the same file, alternated round by round so both see the
# same machine. Each round: qjit-run --generate 128 after a 9-token prompt, llama-bench tg128 with
# one repetition. Prints one line per round and program: threads, tokens per second.
#
# Usage: bench/smollm2_decode.sh [ROUNDS] [THREADS...]        default: 5 rounds, threads 1 2
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${1:-5}"
shift || true
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)
model="$("$root/scripts/fetch_model.sh")"
bench="$("$root/bench/peer_llama_cpp.sh" --build-only)"
prompt=6403,1980,253,655,28,665,436,253,1838  # "Once upon a time, there was a little"
for round in $(seq "$rounds"); do
  for t in "${threads[@]}"; do
    qjit=$("$root/build/tools/qjit-run" --model "$model" --generate 128 --prompt-tokens "$prompt" --threads "$t" --json |
           python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"{d['tokens_per_second']:.1f} p50 {d['p50_ms']:.2f} ms p99 {d['p99_ms']:.2f} ms\")")
    peer=$("$bench" -m "$model" -t "$t" -p 0 -n 128 -r 1 -o json |
           python3 -c "import json,sys; print(f\"{json.load(sys.stdin)[0]['avg_ts']:.1f}\")")
    echo "round $round threads $t: qjit $qjit | llama.cpp $peer"
  done
done
