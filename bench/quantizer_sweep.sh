#!/usr/bin/env bash
# Accuracy of every qjit quantization method on a GGUF model, its linear layers requantized from
# the file's own weights: one qjit-run JSON line per method and width. The evaluation is the first
# 200 paragraphs of the TinyStories text in shared/models (for SmolLM2 the same tokens as
# shared/smollm2/eval.seq.u32); the calibrated runs (CAL) calibrate on 64 paragraphs from 400 on,
# disjoint from them. Each line gains "run" (the name below) and "model_name".
#
# Usage: bench/quantizer_sweep.sh smollm2|gemma3 OUT.jsonl [RUN...]   RUN: a name below (default: all)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model_name="${1:?usage: bench/quantizer_sweep.sh smollm2|gemma3 OUT.jsonl [RUN...]}"
out="${2:?usage: bench/quantizer_sweep.sh smollm2|gemma3 OUT.jsonl [RUN...]}"
shift 2
case "$model_name" in
  smollm2) model="$("$root/scripts/fetch_model.sh")" ;;
  gemma3) model="$("$root/scripts/fetch_model.sh" --gemma3)" ;;
  *) echo "quantizer_sweep.sh: no model named $model_name (smollm2 or gemma3)" >&2; exit 2 ;;
esac
text="$root/../shared/models/text/tinystories_val.txt"
calibration="$(mktemp --suffix=.txt)"
trap 'rm -f "$calibration"' EXIT
# Paragraphs 400.. of the text (split at blank lines, as qjit-run --text-file splits it).
python3 - "$text" "$calibration" <<'PY'
import re, sys
paragraphs = [p.strip() for p in re.split(r"\n\s*\n", open(sys.argv[1], encoding="utf-8").read()) if p.strip()]
open(sys.argv[2], "w", encoding="utf-8").write("\n\n".join(paragraphs[400:656]) + "\n")
PY
calibrated=(--calibration-text "$calibration" --calibration-sequences 64)
declare -A runs=(
  [exact]="--method exact"
  [rtn2]="--method rtn --bits 2 --group 128"       [rtn3]="--method rtn --bits 3 --group 128"
  [rtn4]="--method rtn --bits 4 --group 128"       [rtn2g32]="--method rtn --bits 2 --group 32"
  [rtn3g32]="--method rtn --bits 3 --group 32"
  [hqq2]="--method hqq --bits 2 --group 128"       [hqq3]="--method hqq --bits 3 --group 128"
  [hqq4]="--method hqq --bits 4 --group 128"       [hqq2g64]="--method hqq --bits 2 --group 64"
  [hqq3g64]="--method hqq --bits 3 --group 64"
  [hqq2i]="--method hqq --bits 2 --group 128 --integer-zeros"
  [hqq3i]="--method hqq --bits 3 --group 128 --integer-zeros"
  [hqq4i]="--method hqq --bits 4 --group 128 --integer-zeros"
  [hqq2c]="--method hqq --bits 2 --group 128 CAL"  [hqq3c]="--method hqq --bits 3 --group 128 CAL"
  [hqq4c]="--method hqq --bits 4 --group 128 CAL"
  [gptq2]="--method gptq --bits 2 --group 128 CAL" [gptq3]="--method gptq --bits 3 --group 128 CAL"
  [gptq4]="--method gptq --bits 4 --group 128 CAL"
  [gptq3_order]="--method gptq --bits 3 --group 128 --act-order CAL"
  [gptq3_damp10]="--method gptq --bits 3 --group 128 --damp 0.1 CAL"
  [gptq3_damp10_order]="--method gptq --bits 3 --group 128 --damp 0.1 --act-order CAL"
  [gptq3_damp001]="--method gptq --bits 3 --group 128 --damp 0.001 CAL"
  [milo3]="--method milo --bits 3 --group 128 --rank-budget 0.10"
  [milo3_offsets]="--method milo --bits 3 --group 128 --rank-budget 0.10 --float-offsets"
  [milo3_rtn]="--method milo --milo-base rtn --bits 3 --group 128 --rank-budget 0.10"
  [milo3c]="--method milo --milo-base gptq --bits 3 --group 128 --rank-budget 0.10 CAL"
  [mixed25n]="--method mixed --group 128 --bits-per-weight 2.5 --no-calibration"
  [mixed30n]="--method mixed --group 128 --bits-per-weight 3.0 --no-calibration"
  [mixed35n]="--method mixed --group 128 --bits-per-weight 3.5 --no-calibration"
  [mixed25]="--method mixed --group 128 --bits-per-weight 2.5 CAL"
  [mixed30]="--method mixed --group 128 --bits-per-weight 3.0 CAL"
  [mixed35]="--method mixed --group 128 --bits-per-weight 3.5 CAL"
  [mixed25l]="--method mixed --group 128 --bits-per-weight 2.5 --share-budget-by-loss CAL"
  [mixed30l]="--method mixed --group 128 --bits-per-weight 3.0 --share-budget-by-loss CAL"
  [mixed35l]="--method mixed --group 128 --bits-per-weight 3.5 --share-budget-by-loss CAL"
)
order=(exact rtn2 rtn3 rtn4 rtn2g32 rtn3g32 hqq2 hqq3 hqq4 hqq2g64 hqq3g64 hqq2i hqq3i hqq4i mixed25n mixed30n
       mixed35n gptq2 gptq3 gptq4 gptq3_order gptq3_damp10 gptq3_damp10_order gptq3_damp001 hqq2c hqq3c hqq4c
       mixed25 mixed30 mixed35 mixed25l mixed30l mixed35l milo3 milo3_offsets milo3_rtn milo3c)
[ $# -gt 0 ] && order=("$@")
for name in "${order[@]}"; do
  [ -n "${runs[$name]:-}" ] || { echo "quantizer_sweep.sh: no run named $name" >&2; exit 2; }
  read -r -a args <<<"${runs[$name]}"
  [ "${args[-1]}" = CAL ] && { unset 'args[-1]'; args+=("${calibrated[@]}"); }
  echo "quantizer_sweep.sh: $model_name $name" >&2
  "$root/build/tools/qjit-run" --model "$model" --text-file "$text" --max-sequences 200 "${args[@]}" --json |
    python3 -c "import json,sys; d=json.load(sys.stdin); d.pop('per_sequence_nll_sum',None); d['run']='$name'; d['model_name']='$model_name'; print(json.dumps(d))" >>"$out"
done
