#!/usr/bin/env bash
# SmolLM2-135M with sparse FFNs, from its GGUF file: what a magnitude threshold on the SwiGLU
# activations costs in NLL and how sparse it makes them, then the FFNs served from neuron files
# (fp16 and 4-bit g32) with a predictor per layer, scored token by token as decoding runs, then
# 4-bit files with calibrated sparsity (resident gates; both scores, four targets), and the 30 %
# weighted file token by token at the full and at half the budget, with and without reads ahead.
# Writes one JSON line per run to OUT.jsonl. Usage: bench/smollm2_flash.sh OUT.jsonl [SEQUENCES]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: bench/smollm2_flash.sh OUT.jsonl [SEQUENCES]}"
sequences="${2:-10}"
shared="$root/../shared"
model="$("$root/scripts/fetch_model.sh")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 "$root/tools/tokenize_text.py" --model "$model" --text "$shared/models/text/tinystories_val.txt" \
        --first 400 --count 64 --out "$work/calibration.seq.u32" >/dev/null
for coding in "--f16" "--bits 4 --group 32"; do
  name=$([ "$coding" = --f16 ] && echo f16 || echo q4g32)
  # shellcheck disable=SC2086
  "$root/build/tools/qjit-flash-convert" --gguf "$model" --out "$work/ffn-$name.qnf" $coding --alignment 512 >&2
done
run() {
  local name="$1"
  shift
  echo "smollm2_flash.sh: $name" >&2
  "$root/build/tools/qjit-run" --model "$model" --tokens "$shared/smollm2/eval.seq.u32" --max-sequences "$sequences" \
      "$@" --json |
    python3 -c "import json,sys; d=json.load(sys.stdin); d.pop('per_sequence_nll_sum',None); d['run']='$name'; print(json.dumps(d))" >>"$out"
}
run exact --token-by-token
for threshold in 0.005 0.01 0.02 0.04 0.08 0.16; do run "threshold_$threshold" --ffn-threshold "$threshold"; done
for name in f16 q4g32; do
  # Every neuron, all resident after the first token: the file's own NLL.
  run "flash_${name}_all" --token-by-token --flash "$work/ffn-$name.qnf" --flash-budget 1
done
for threshold in 0.08 0.16; do
  run "flash_f16_predictor_$threshold" --token-by-token --flash "$work/ffn-f16.qnf" --flash-recall 0.99 \
      --ffn-threshold "$threshold" --calibration-tokens "$work/calibration.seq.u32" --calibration-sequences 64
done
q4g32=(--bits 4 --group 32 --alignment 512)
for score in gate weighted; do
  for sparsity in 0.2 0.3 0.4 0.5; do
    "$root/build/tools/qjit-flash-convert" --gguf "$model" --out "$work/ffn-$score-$sparsity.qnf" "${q4g32[@]}" \
        --sparsity "$sparsity" --sparsity-score "$score" --calibration-tokens "$work/calibration.seq.u32" \
        --calibration-rows 1024 >&2
    run "sparse_${score}_$sparsity" --flash "$work/ffn-$score-$sparsity.qnf" --flash-budget 1
  done
done
for budget in 1 0.5; do
  run "flash_q4g32_all_budget_$budget" --token-by-token --flash "$work/ffn-q4g32.qnf" --flash-budget "$budget"
  run "sparse_weighted_0.3_budget_$budget" --token-by-token --flash "$work/ffn-weighted-0.3.qnf" --flash-budget "$budget"
done
# The same at half the budget with the next layer's neurons read while this one computes.
run "flash_q4g32_all_budget_0.5_read_ahead" --token-by-token --flash "$work/ffn-q4g32.qnf" --flash-budget 0.5 \
    --flash-read-ahead
run "sparse_weighted_0.3_budget_0.5_read_ahead" --token-by-token --flash "$work/ffn-weighted-0.3.qnf" \
    --flash-budget 0.5 --flash-read-ahead
