#!/usr/bin/env bash
# A 7B-shaped SwiGLU model (bench/make_llama_gguf.py's llama 7b, random weights, Q4_0) decoding end
# to end with its FFNs served from a 4-bit neuron file under a DRAM budget smaller than they are
# (qjit-run --flash), beside the same model with every FFN resident. Each budget runs without and
# with reads ahead. The first flash run measures the disk's read curve (--flash-tune-reads; kept in
# the tuning database), which every row's reads are then compared with.
# Writes one JSON line per run to OUT.jsonl.
# Usage: bench/synthetic_7b_flash.sh OUT.jsonl [TOKENS] [WORK_DIR]   (WORK_DIR keeps the 2.9 GB file)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: bench/synthetic_7b_flash.sh OUT.jsonl [TOKENS] [WORK_DIR]}"
tokens="${2:-16}"
work="${3:-$root/build/peers/flash}"
mkdir -p "$work"
model="$(python3 "$root/bench/make_llama_gguf.py" --models 7b-Q4_0 | tail -1)"
ffn="$work/llama-synthetic-7b.q4g128.qnf"
[ -f "$ffn" ] || "$root/build/tools/qjit-flash-convert" --gguf "$model" --out "$ffn" --bits 4 --group 128 \
    --alignment 512 >&2
run() {
  local name="$1"
  shift
  echo "synthetic_7b_flash.sh: $name" >&2
  "$root/build/tools/qjit-run" --model "$model" --generate "$tokens" --prompt-tokens 1,2,3 "$@" --json |
    python3 -c "import json,sys; d=json.load(sys.stdin); d['run']='$name'; print(json.dumps(d))" >>"$out"
}
run resident
for budget in 0.5 0.25; do
  run "flash_budget_$budget" --flash "$ffn" --flash-budget "$budget" --flash-tune-reads
  run "flash_budget_${budget}_read_ahead" --flash "$ffn" --flash-budget "$budget" --flash-read-ahead
done
