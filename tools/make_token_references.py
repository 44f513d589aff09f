#!/usr/bin/env python3
"""Token lists made by llama.cpp's own tokenizer, for qjit's tokenizer tests (tests/test_tokenizer.cpp).

For each sample text of tests/data/tokenizer/sample_texts.json, writes what llama.cpp's
llama_tokenize(vocab, text, add_special=true, parse_special=false) returns for a GGUF file, and
with parse_special=true for the texts that hold special tokens. llama.cpp is reached through the
Python binding of llama-cpp-python's sdist and the libllama that bench/peer_llama_cpp.sh builds
from it (diskcache and jinja2 are the binding's only imports beyond the standard library):

    PYTHONPATH=build/peers/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=build/peers/llama.cpp/bin \\
        tools/make_token_references.py --model SmolLM2-135M-Instruct.Q4_1.gguf --name smollm2

With --pre NAME the file's vocabulary is first written to a vocabulary-only GGUF file with
tokenizer.ggml.pre set to NAME (llama-bpe, qwen2, ...): one real vocabulary and merge list run
through each byte-level pre-tokenizer. Output: tests/data/tokenizer/NAME.json.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import gguf

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tokenizer"
SPECIAL_MARKERS = ("<|im_start|>", "<bos>", "<start_of_turn>")


def vocabulary_only(source, pre, out):
    """`source`'s metadata (no tensors) with tokenizer.ggml.pre set to `pre`."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(out, reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = pre if key == "tokenizer.ggml.pre" else field.contents()
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the GGUF file whose vocabulary to use")
    parser.add_argument("--name", required=True, help="the output's name: tests/data/tokenizer/NAME.json")
    parser.add_argument("--pre", help="tokenize with this tokenizer.ggml.pre in place of the file's")
    args = parser.parse_args()
    try:
        import llama_cpp
    except ImportError as missing:
        sys.exit(f"make_token_references.py: {missing}: set PYTHONPATH and LLAMA_CPP_LIB_PATH as the help says")

    texts = json.loads((DATA / "sample_texts.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as scratch:
        path = args.model
        if args.pre:
            path = os.path.join(scratch, "vocabulary.gguf")
            vocabulary_only(args.model, args.pre, path)
        model = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        cases = []
        for text in texts:
            cases.append({"text": text, "parse_special": False,
                          "tokens": model.tokenize(text.encode("utf-8"), add_bos=True, special=False)})
            if any(marker in text for marker in SPECIAL_MARKERS):
                cases.append({"text": text, "parse_special": True,
                              "tokens": model.tokenize(text.encode("utf-8"), add_bos=True, special=True)})
    result = {
        "model": os.path.basename(args.model),
        "model_sha256": sha256(args.model),
        "pre_tokenizer": args.pre or "the file's own",
        "made_by": "llama_tokenize(add_special=true, parse_special as given) of llama-cpp-python "
                   f"{llama_cpp.__version__}'s llama.cpp, through tools/make_token_references.py",
        "command": "tools/make_token_references.py " + " ".join(
            f"--{k} {os.path.basename(v) if k == 'model' else v}" for k, v in vars(args).items() if v),
        "cases": cases,
    }
    out = DATA / f"{args.name}.json"
    out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(cases)} cases, {sum(len(c['tokens']) for c in cases)} tokens")


if __name__ == "__main__":
    main()
