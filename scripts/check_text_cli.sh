#!/usr/bin/env bash
# The text modes of qjit-run, as a user types them, on SmolLM2's real file (skipped, exit 77, where
# scripts/fetch_model.sh has not fetched it): a greedy --prompt gives the tokens of the same prompt
# given as --prompt-tokens; a seed repeats a sampled text and another seed changes it; --stop ends
# the text before the stop string; --chat answers a question read from standard input; --text-file
# scores the TinyStories paragraphs as llama.cpp's tokens of them score, and --calibration-text
# calibrates on them as on those tokens; bad input is refused with a message naming it.
# Usage: scripts/check_text_cli.sh QJIT_RUN SHARED_MODELS_DIR     (a ctest case: text_cli)
set -euo pipefail
qjit_run="${1:?usage: scripts/check_text_cli.sh QJIT_RUN SHARED_MODELS_DIR}"
shared="${2:?usage: scripts/check_text_cli.sh QJIT_RUN SHARED_MODELS_DIR}"
model="${QJIT_MODEL_DIR:-$HOME/.cache/qjit/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$model" ] || { echo "text_cli: $model is absent (scripts/fetch_model.sh): skipped"; exit 77; }
run() { "$qjit_run" --model "$model" --threads 2 "$@"; }
field() { python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
fail() { echo "text_cli: $*" >&2; exit 1; }

greedy="$(run --prompt "Once upon a time" --generate 24 --json)"
prompt_tokens="$(field prompt_tokens <<<"$greedy" | tr -d '[] ')"
by_tokens="$(run --prompt-tokens "$prompt_tokens" --generate 24 --json | field generated_tokens)"
[ "$(field generated_tokens <<<"$greedy")" = "$by_tokens" ] || fail "greedy --prompt differs from --prompt-tokens"

sampled() { run --prompt "The little dog" --generate 24 --temperature 0.9 --top-p 0.95 --seed "$1" --json | field text; }
[ "$(sampled 3)" = "$(sampled 3)" ] || fail "the same seed gave two texts"
[ "$(sampled 3)" != "$(sampled 4)" ] || fail "seeds 3 and 4 gave the same text"

stopped="$(run --prompt "Once upon a time" --generate 48 --stop "," --json)"
[ "$(field stop_reason <<<"$stopped")" = stop_string ] || fail "--stop did not stop generation"
case "$(field text <<<"$stopped")" in *,*) fail "--stop left the stop string in the text" ;; esac

answer="$(printf 'What is the capital of France?\n' | run --chat --generate 24 2>/dev/null)"
case "$answer" in *Paris*) ;; *) fail "--chat answered '$answer'" ;; esac

nll() { run "$@" --max-sequences 20 --json | field nll; }
if [ -f "$shared/text/tinystories_val.txt" ] && [ -f "$shared/../smollm2/eval.seq.u32" ]; then
  [ "$(nll --text-file "$shared/text/tinystories_val.txt")" = "$(nll --tokens "$shared/../smollm2/eval.seq.u32")" ] ||
    fail "--text-file scores differently from llama.cpp's tokens of the same paragraphs"
  gptq() { run --method gptq --bits 4 --group 64 --calibration-sequences 3 "$@" --tokens "$shared/../smollm2/eval.seq.u32" \
               --max-sequences 2 --json | field nll; }
  [ "$(gptq --calibration-text "$shared/text/tinystories_val.txt")" = \
    "$(gptq --calibration-tokens "$shared/../smollm2/eval.seq.u32")" ] ||
    fail "--calibration-text calibrates differently from llama.cpp's tokens of the same paragraphs"
fi

refused() {  # expected status, expected message, arguments...
  local status=0 message
  message="$(run "${@:3}" 2>&1 >/dev/null)" || status=$?
  [ "$status" = "$1" ] || fail "'${*:3}' exited $status, expected $1 ($message)"
  case "$message" in *"$2"*) ;; *) fail "'${*:3}' said '$message', expected '$2'" ;; esac
}
refused 2 "--prompt: the prompt is empty" --prompt ""
refused 1 "invalid UTF-8 at byte 3" --prompt $'abc\xff'
refused 2 "top_p 1.5 is outside (0, 1]" --prompt "Hi" --top-p 1.5
refused 2 "go with --prompt, --prompt-file or --chat" --prompt-tokens 1,2 --generate 2 --temperature 0.5
refused 1 "unknown chat template 'alpaca'" --chat --chat-template alpaca
printf 'fine\n\n\xff\n' > "${TMPDIR:-/tmp}/text_cli.$$.txt"
refused 1 "paragraph 1: invalid UTF-8 at byte 0" --text-file "${TMPDIR:-/tmp}/text_cli.$$.txt"
rm -f "${TMPDIR:-/tmp}/text_cli.$$.txt"
refused 2 "--calibration-tokens or --calibration-text, not both" --method gptq --calibration-text a --calibration-tokens b
echo "text_cli: greedy, seeds, --stop, --chat, --text-file, --calibration-text and refusals as expected"
