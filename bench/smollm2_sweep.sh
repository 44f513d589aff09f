#!/usr/bin/env bash
# Accuracy of every qjit quantization method on SmolLM2-135M (the GGUF model of
# scripts/fetch_model.sh), against the model's own Q4_1 weights imported exactly: one qjit-run JSON
# line per method and width on shared/smollm2's 200 evaluation sequences. The calibrated runs (CAL)
# calibrate on paragraphs 400 on of the TinyStories text (disjoint from the evaluation's 0-199).
#
# Usage: bench/smollm2_sweep.sh OUT.jsonl [RUN...]     RUN: a name below (default: all of them)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: bench/smollm2_sweep.sh OUT.jsonl [RUN...]}"
shift
shared="$root/../shared"
model="$("$root/scripts/fetch_model.sh")"
calibration="$(mktemp --suffix=.seq.u32)"
trap 'rm -f "$calibration"' EXIT
python3 "$root/tools/tokenize_text.py" --model "$model" --text "$shared/models/text/tinystories_val.txt" \
        --first 400 --count 256 --out "$calibration" >/dev/null
calibrated=(--calibration-tokens "$calibration" --calibration-sequences 256)
declare -A runs=(
  [exact]="--method exact"
  [rtn2]="--method rtn --bits 2 --group 128"    [rtn3]="--method rtn --bits 3 --group 128"
  [rtn4]="--method rtn --bits 4 --group 128"
  [hqq2]="--method hqq --bits 2 --group 128"    [hqq3]="--method hqq --bits 3 --group 128"
  [hqq4]="--method hqq --bits 4 --group 128"
  [gptq2]="--method gptq --bits 2 --group 128 CAL" [gptq3]="--method gptq --bits 3 --group 128 CAL"
  [gptq4]="--method gptq --bits 4 --group 128 CAL"
  [hqq2cal]="--method hqq --bits 2 --group 128 CAL" [hqq3cal]="--method hqq --bits 3 --group 128 CAL"
  [hqq4cal]="--method hqq --bits 4 --group 128 CAL"
  [hqq3off_cal]="--method hqq --bits 3 --group 128 --float-offsets CAL"
  [milo3_r16q8]="--method milo --bits 3 --group 128 --rank 16 --low-rank-bits 8"
  [milo3_r32q3]="--method milo --bits 3 --group 128 --rank 32 --low-rank-bits 3"
  [milo3_hqq_b10q8]="--method milo --bits 3 --group 128 --rank-budget 0.10 --low-rank-bits 8 CAL"
  [milo3_gptq_b10q8]="--method milo --milo-base gptq --bits 3 --group 128 --rank-budget 0.10 --low-rank-bits 8 CAL"
  [milo3_gptq_b10q3]="--method milo --milo-base gptq --bits 3 --group 128 --rank-budget 0.10 --low-rank-bits 3 CAL"
  [milo2_gptq_b16q8]="--method milo --milo-base gptq --bits 2 --group 128 --rank-budget 0.16 --low-rank-bits 8 CAL"
  [mixed]="--method mixed --group 128 --alpha 0.25 CAL"
  [mixed25]="--method mixed --group 128 --bits-per-weight 2.5 CAL"
  [mixed30]="--method mixed --group 128 --bits-per-weight 3.0 CAL"
  [mixed35]="--method mixed --group 128 --bits-per-weight 3.5 CAL"
  [mixed40]="--method mixed --group 128 --bits-per-weight 4.0 CAL"
)
order=(exact rtn2 rtn3 rtn4 hqq2 hqq3 hqq4 hqq2cal hqq3cal hqq4cal hqq3off_cal gptq2 gptq3 gptq4 milo3_r16q8
       milo3_r32q3 milo3_hqq_b10q8 milo3_gptq_b10q8 milo3_gptq_b10q3 milo2_gptq_b16q8 mixed mixed25 mixed30 mixed35
       mixed40)
[ $# -gt 0 ] && order=("$@")
for name in "${order[@]}"; do
  [ -n "${runs[$name]:-}" ] || { echo "smollm2_sweep.sh: no run named $name" >&2; exit 2; }
  read -r -a args <<<"${runs[$name]}"
  [ "${args[-1]}" = CAL ] && { unset 'args[-1]'; args+=("${calibrated[@]}"); }
  echo "smollm2_sweep.sh: $name" >&2
  "$root/build/tools/qjit-run" --model "$model" --tokens "$shared/smollm2/eval.seq.u32" "${args[@]}" --json |
    python3 -c "import json,sys; d=json.load(sys.stdin); d.pop('per_sequence_nll_sum',None); d['run']='$name'; print(json.dumps(d))" >>"$out"
done
