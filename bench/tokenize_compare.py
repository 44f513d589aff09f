#!/usr/bin/env python3
"""qjit's GGUF tokenizer against llama.cpp's on TinyStories paragraphs: how many come out identical,
and each one's speed in the same run (the median of 5 passes over all paragraphs, one Python call
per paragraph on both sides: qjit.Model.tokenize, and llama_tokenize(add_special=true,
parse_special=false) called through ctypes into a buffer made once; the binding's own
Llama.tokenize would size its buffer from the context and, for a vocabulary-only load, tokenize
every text twice).

Needs the installed qjit package (pip install .) and llama.cpp's Python binding from the sdist
bench/peer_llama_cpp.sh unpacks and builds (diskcache and jinja2 from pip):

    PYTHONPATH=build/peers/llama_cpp_python-0.3.36 LLAMA_CPP_LIB_PATH=build/peers/llama.cpp/bin \\
        bench/tokenize_compare.py --model ~/.cache/qjit/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def median_seconds(call, passes=5):
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True, help="a GGUF file (repeatable)")
    parser.add_argument("--text", default=str(ROOT.parent / "shared" / "models" / "text" / "tinystories_val.txt"))
    parser.add_argument("--paragraphs", type=int, default=2000, help="the first N paragraphs (default 2000)")
    args = parser.parse_args()
    try:
        import llama_cpp
        import qjit
    except ImportError as missing:
        sys.exit(f"tokenize_compare.py: {missing}: install qjit, and set PYTHONPATH and LLAMA_CPP_LIB_PATH as the help says")

    text = Path(args.text).read_text(encoding="utf-8")
    paragraphs = [p.strip(" \t\n\v\f\r") for p in text.split("\n\n")]
    paragraphs = [p for p in paragraphs if p][: args.paragraphs]
    megabytes = sum(len(p.encode()) for p in paragraphs) / 1e6
    print("| file | paragraphs | identical | qjit MB/s | llama.cpp MB/s |")
    print("|---|---|---|---|---|")
    for path in args.model:
        reference = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        model = qjit.Model.from_gguf(path, threads=1)
        ours = lambda p: model.tokenize(p)  # noqa: E731
        vocab, buffer = reference._model.vocab, (llama_cpp.llama_token * 65536)()

        def theirs(paragraph):
            text = paragraph.encode()
            count = llama_cpp.llama_tokenize(vocab, text, len(text), buffer, len(buffer), True, False)
            return list(buffer[:count])

        identical = sum(ours(p) == theirs(p) for p in paragraphs)
        qjit_s = median_seconds(lambda: [ours(p) for p in paragraphs])
        llama_s = median_seconds(lambda: [theirs(p) for p in paragraphs])
        print(f"| {os.path.basename(path)} | {len(paragraphs)} ({megabytes:.2f} MB) | {identical} | "
              f"{megabytes / qjit_s:.2f} | {megabytes / llama_s:.2f} |")


if __name__ == "__main__":
    main()
