#!/usr/bin/env bash
# Accuracy of every qjit quantization method on SmolLM2-135M (the GGUF model of
# scripts/fetch_model.sh), against the model's own Q4_1 weights imported exactly: one qjit-run JSON
# line per method and width on shared/smollm2's 200 evaluation sequences. GPTQ and 2/4/16 calibrate
# on paragraphs 400 on of the TinyStories text (disjoint from the evaluation's 0-199).
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
  [milo3_r16q8]="--method milo --bits 3 --group 128 --rank 16 --low-rank-bits 8"
  [milo3_r32q3]="--method milo --bits 3 --group 128 --rank 32 --low-rank-bits 3"
  [mixed]="--method mixed --group 128 --alpha 0.25 CAL"
)
order=(exact rtn2 rtn3 rtn4 hqq2 hqq3 hqq4 gptq2 gptq3 gptq4 milo3_r16q8 milo3_r32q3 mixed)
[ $# -gt 0 ] && order=("$@")
for name in "${order[@]}"; do
  [ -n "${runs[$name]:-}" ] || { echo "smollm2_sweep.sh: no run named $name" >&2; exit 2; }
  read -r -a args <<<"${runs[$name]}"
  [ "${args[-1]}" = CAL ] && { unset 'args[-1]'; args+=("${calibrated[@]}"); }
  echo "smollm2_sweep.sh: $name" >&2
  "$root/build/tools/qjit-run" --model "$model" --tokens "$shared/smollm2/eval.seq.u32" "${args[@]}" --json |
    python3 -c "import json,sys; d=json.load(sys.stdin); d.pop('per_sequence_nll_sum',None); d['run']='$name'; print(json.dumps(d))" >>"$out"
done
