#!/usr/bin/env python3
"""llama.cpp's own evaluation of a GGUF model: the oracle qjit-run's NLL is held to.

Splits a text into paragraphs as shared/smollm2/README.md describes (on "\\n\\n", each stripped,
empty ones skipped), tokenizes paragraphs FIRST..FIRST+COUNT-1 with llama.cpp
(llama_tokenize(add_special=true, parse_special=false): the model's own BOS rule), writes them as a
*.seq.u32 file, and scores each sequence with llama.cpp: one batch from an empty KV cache, the
logits of every position, NLL = sum over t = 0 .. n-2 of -log softmax(logits[t])[token[t+1]] in
float64. Writes a JSON like shared/smollm2/eval_nll.json (mean_nll, predicted_tokens,
per_sequence_nll_sum), plus llama.cpp's greedy continuation of a short prompt.

The KV cache is fp32 by default, as qjit-run's is: llama.cpp's own default (fp16) also rounds q and
the attention weights to fp16 in its products, which moves Gemma 3 270M's NLL by about 5e-3.
--kv-cache f16 scores with llama.cpp's default and writes eval_nll_kv_f16.json instead.

Run with llama.cpp's Python binding on the path, e.g.
  PYTHONPATH=build/peers/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=build/peers/llama.cpp/bin \\
    python3 bench/llama_cpp_nll.py --model gemma-3-270m-q4_k_m.gguf \\
      --text ../shared/models/text/tinystories_val.txt --out-dir tests/data/gemma3-270m
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# The llama.cpp source llama-cpp-python 0.3.36 vendors (see shared/smollm2/README.md).
LLAMA_CPP_COMMIT = "0c1e570"
KV_TYPES = {"f32": 0, "f16": 1}  # GGML_TYPE_F32, GGML_TYPE_F16


def paragraphs(text):
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def write_sequences(path, sequences):
    with open(path, "wb") as f:
        f.write(struct.pack("<I", len(sequences)))
        f.write(struct.pack(f"<{len(sequences)}I", *[len(s) for s in sequences]))
        for s in sequences:
            f.write(struct.pack(f"<{len(s)}I", *s))


def sequence_nll(llm, tokens):
    llm.reset()  # the next eval starts from an empty KV cache
    llm.eval(tokens)
    logits = np.asarray(llm.scores[: len(tokens)], dtype=np.float64)
    most = logits.max(axis=1, keepdims=True)
    log_norm = most[:, 0] + np.log(np.exp(logits - most).sum(axis=1))
    targets = np.asarray(tokens[1:])
    return float(np.sum(log_norm[:-1] - logits[np.arange(len(tokens) - 1), targets]))


def greedy(llm, prompt, count):
    llm.reset()
    tokens = list(prompt)
    llm.eval(tokens)
    generated = []
    for _ in range(count):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        generated.append(token)
        llm.eval([token])
    return generated


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--text", required=True)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=256,
                        help="llama.cpp's context: the longest sequence (logits of every position are kept)")
    parser.add_argument("--kv-cache", choices=["f32", "f16"], default="f32", help="llama.cpp's K and V type")
    parser.add_argument("--prompt", default="Once upon a time", help="text of the greedy continuation")
    parser.add_argument("--generate", type=int, default=32, help="greedy tokens after the prompt")
    parser.add_argument("--out-dir", required=True, help="writes eval.seq.u32, eval_nll.json, greedy.json")
    args = parser.parse_args()

    import llama_cpp  # the binding, with LLAMA_CPP_LIB_PATH naming the built library

    with open(args.text, encoding="utf-8") as f:
        chosen = paragraphs(f.read())[args.first : args.first + args.count]
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=args.context, n_batch=args.context, n_ubatch=args.context, logits_all=True,
                          n_threads=args.threads, n_threads_batch=args.threads, verbose=False,
                          type_k=KV_TYPES[args.kv_cache], type_v=KV_TYPES[args.kv_cache])
    sequences = [llm.tokenize(p.encode("utf-8"), add_bos=True, special=False) for p in chosen]
    kept = [s for s in sequences if len(s) >= 2]
    if max(len(s) for s in kept) > args.context:
        sys.exit(f"a sequence of {max(len(s) for s in kept)} tokens exceeds --context {args.context}")
    os.makedirs(args.out_dir, exist_ok=True)
    write_sequences(os.path.join(args.out_dir, "eval.seq.u32"), kept)

    sums = []
    for i, tokens in enumerate(kept):
        sums.append(sequence_nll(llm, tokens))
        print(f"\r{i + 1}/{len(kept)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    predicted = sum(len(s) - 1 for s in kept)
    command = "python3 bench/llama_cpp_nll.py " + " ".join(sys.argv[1:])
    result = {
        "model": os.path.basename(args.model),
        "paragraphs": f"{args.first}-{args.first + args.count - 1}",
        "sequences": len(kept),
        "dropped_short": len(sequences) - len(kept),
        "predicted_tokens": predicted,
        "mean_nll": round(sum(sums) / predicted, 8),
        "threads": args.threads,
        "kv_cache": args.kv_cache,
        "llama_cpp": f"commit {LLAMA_CPP_COMMIT} (llama-cpp-python {llama_cpp.__version__})",
        "command": command,
        "per_sequence_nll_sum": [round(s, 6) for s in sums],
    }
    suffix = "" if args.kv_cache == "f32" else "_kv_" + args.kv_cache
    with open(os.path.join(args.out_dir, f"eval_nll{suffix}.json"), "w") as f:
        json.dump(result, f)
        f.write("\n")

    prompt = llm.tokenize(args.prompt.encode("utf-8"), add_bos=True, special=False)
    continuation = greedy(llm, prompt, args.generate)
    with open(os.path.join(args.out_dir, f"greedy{suffix}.json"), "w") as f:
        json.dump({"prompt": args.prompt, "prompt_tokens": prompt, "generated_tokens": continuation,
                   "text": llm.detokenize(continuation).decode("utf-8", errors="replace"),
                   "kv_cache": args.kv_cache, "llama_cpp": result["llama_cpp"], "command": command}, f)
        f.write("\n")
    print(json.dumps({k: v for k, v in result.items() if k != "per_sequence_nll_sum"}))


if __name__ == "__main__":
    main()
