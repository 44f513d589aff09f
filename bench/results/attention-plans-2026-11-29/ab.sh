#!/bin/bash
# A/B of the attention plan in a whole model: databases identical but for the attention record.
DIR=${DIR:-/tmp/attention-ab}  # dbA.yaml: the tuned record; dbB.yaml: the same with family=avx512,rows=4
M=build/peers/models/SmolLM2-135M-Instruct.Q4_0.requantized.gguf
for round in 1 2 3; do
  for db in A B; do
    for t in 1 2; do
      cp $DIR/db$db.yaml $DIR/run.yaml
      p=$(QJIT_TUNING_DB=$DIR/run.yaml build/tools/qjit-run --model $M --prompt-bench 512 --threads $t --json 2>/dev/null | tail -1 | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['prompt_bench_tokens_per_second'])")
      cp $DIR/db$db.yaml $DIR/run.yaml
      d=$(QJIT_TUNING_DB=$DIR/run.yaml build/tools/qjit-run --model $M --generate 512 --threads $t --json 2>/dev/null | tail -1 | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['tokens_per_second'])")
      echo "$round $db $t prompt512 $p decode512 $d"
    done
  done
done
