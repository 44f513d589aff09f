#!/usr/bin/env bash
# A checkpoint tuned ahead of time is created from the database later: writes a small synthetic
# GPTQ checkpoint, tunes it with qjit-tune --checkpoint into a scratch database (batch 1 and 4),
# then runs the checkpoint example against that database and expects every layer's tiling to come
# from it (or from the same key earlier in the run), never from a search.
# Usage: scripts/check_checkpoint_tuning.sh SYNTHETIC_CHECKPOINT QJIT_TUNE RUN_CHECKPOINT
set -euo pipefail
synthetic="$1" tune="$2" run="$3"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cat > "$scratch/model.yaml" <<'YAML'
name: tiny
layers: 3
linear:
  - {name: self_attn.q_proj, k: 256, n: 256}
  - {name: self_attn.k_proj, k: 256, n: 256}
  - {name: mlp.up_proj, k: 256, n: 96}
  - {name: mlp.down_proj, k: 96, n: 256}
YAML
"$synthetic" --model "$scratch/model.yaml" --bits 3 --group 32 --act-order --shards 2 "$scratch/checkpoint" >/dev/null
"$tune" --checkpoint "$scratch/checkpoint" --db "$scratch/tuning.yaml" --batch 1 4 --budget 30 --repeats 3 \
        --no-compare > "$scratch/tune.txt"
grep -q "checkpoint .*12 layers, 3-bit, group 32" "$scratch/tune.txt" || { cat "$scratch/tune.txt"; exit 1; }
for rows in 1 4; do
  QJIT_TUNING_DB="$scratch/tuning.yaml" QJIT_TUNING_BUDGET_MS=200 "$run" "$scratch/checkpoint" "$rows" > "$scratch/run.txt"
  [ "$(grep -c "tiling from" "$scratch/run.txt")" = 12 ] || { cat "$scratch/run.txt"; exit 1; }
  if grep "tiling from" "$scratch/run.txt" | grep -qv "tiling from database\|tiling from context"; then
    echo "rows $rows: a layer was not created from the database:" >&2
    cat "$scratch/run.txt" >&2
    exit 1
  fi
  grep -q "tiling from database" "$scratch/run.txt"
done
echo "checkpoint tuned by qjit-tune: every layer created from the database at 1 and 4 rows"
