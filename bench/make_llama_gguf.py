#!/usr/bin/env python3
"""Writes synthetic Llama GGUF files (random weights) for whole-model benchmarks.

Each shape is written once as F16 (weights normal with std 0.02, norms 1.0, a fixed seed), one
tensor at a time so that a 7B file never sits in memory, then converted to the wanted types by
llama.cpp's own llama-quantize (built into build/peers/llama.cpp on demand, after
bench/peer_llama_cpp.sh). The tokenizer (tokenizer.ggml.* keys) and so the vocabulary size come from
an existing GGUF file, as llama.cpp will not load a model without one. The F16 file is deleted
afterwards unless --keep-f16. Files already there are kept. Needs `pip install gguf numpy`.

Shapes: 1b         llama: dim 2048, FFN 8192, 16 layers, 32 heads, 8 KV heads
        7b         llama, Llama-2-7B's: dim 4096, FFN 11008, 32 layers, 32 heads, 32 KV heads
        qwen2_0.5b qwen2 (q, k and v biases, RoPE base 1e6), Qwen2-0.5B's: dim 896, FFN 4864, 24 layers,
                   14 heads, 2 KV heads
        qwen2_7b   qwen2, Qwen2-7B's: dim 3584, FFN 18944, 28 layers, 28 heads, 4 KV heads
  (the vocabulary is the tokenizer file's, not the original model's)

Usage: bench/make_llama_gguf.py [--models 1b-Q4_0,1b-Q4_K_M,7b-Q4_0] [--out-dir build/peers/models]
                                [--tokenizer-from FILE.gguf] [--keep-f16] [--check]
  Prints one path per file. Names: <architecture>-synthetic-<size>.<type>.gguf (llama-synthetic-7b.Q4_0.gguf,
  qwen2-synthetic-7b.Q4_K_M.gguf).
  --tokenizer-from  default: scripts/fetch_model.sh's SmolLM2 file (vocabulary 49152)
  --check           run `qjit-run --generate 4` on each file (qjit must load it)
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PEER_BUILD = ROOT / "build" / "peers" / "llama.cpp"
QUANTIZE = PEER_BUILD / "bin" / "llama-quantize"

SHAPES = {
    "1b": dict(arch="llama", dim=2048, hidden=8192, layers=16, heads=32, kv_heads=8, rope_base=10000.0),
    "7b": dict(arch="llama", dim=4096, hidden=11008, layers=32, heads=32, kv_heads=32, rope_base=10000.0),
    "qwen2_0.5b": dict(arch="qwen2", dim=896, hidden=4864, layers=24, heads=14, kv_heads=2, rope_base=1e6),
    "qwen2_7b": dict(arch="qwen2", dim=3584, hidden=18944, layers=28, heads=28, kv_heads=4, rope_base=1e6),
}


def file_stem(shape_name):
    """llama-synthetic-7b, qwen2-synthetic-0.5b."""
    arch = SHAPES[shape_name]["arch"]
    return f"{arch}-synthetic-{shape_name.removeprefix(arch + '_')}"
DEFAULT_MODELS = "1b-Q4_0,1b-Q4_K_M,7b-Q4_0"


def log(*args):
    print("make_llama_gguf:", *args, file=sys.stderr, flush=True)


def default_tokenizer_file():
    return subprocess.run([str(ROOT / "scripts" / "fetch_model.sh")], check=True, capture_output=True,
                          text=True).stdout.strip()


def quantize_binary():
    """llama.cpp's llama-quantize, built into bench/peer_llama_cpp.sh's build folder if missing."""
    if not QUANTIZE.exists():
        if not (PEER_BUILD / "CMakeCache.txt").exists():
            subprocess.run([str(ROOT / "bench" / "peer_llama_cpp.sh"), "--build-only"], check=True,
                           stdout=subprocess.DEVNULL)
        log("building llama-quantize in", PEER_BUILD)
        logfile = PEER_BUILD.parent / "llama-quantize-build.log"
        with open(logfile, "w") as out:
            done = subprocess.run(["cmake", "--build", str(PEER_BUILD), "-j", str(os.cpu_count() or 1),
                                   "--target", "llama-quantize"], stdout=out, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            sys.stderr.write(logfile.read_text()[-4000:])
            sys.exit(f"make_llama_gguf: building llama-quantize failed; its log is {logfile}")
    return QUANTIZE


def quantize(source, target, type_name, allow_requantize=False):
    """Runs llama-quantize SOURCE TARGET TYPE into a temporary name, renamed when it succeeded."""
    partial = Path(str(target) + ".partial")
    command = [str(quantize_binary())] + (["--allow-requantize"] if allow_requantize else [])
    command += [str(source), str(partial), type_name, str(os.cpu_count() or 1)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        sys.exit(f"make_llama_gguf: {' '.join(command)} failed")
    partial.rename(target)


def copy_tokenizer(writer, tokenizer_file):
    """Copies every tokenizer.* key; returns the vocabulary size."""
    import gguf
    reader = gguf.GGUFReader(tokenizer_file)
    vocab = None
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, field.types[0])
        if key == "tokenizer.ggml.tokens":
            vocab = len(value)
    if vocab is None:
        sys.exit(f"make_llama_gguf: {tokenizer_file} has no tokenizer.ggml.tokens")
    return vocab


def write_f16(path, shape_name, tokenizer_file, seed):
    """The model at F16 (norms F32), written tensor by tensor."""
    import gguf
    s = SHAPES[shape_name]
    dim, hidden, head_dim = s["dim"], s["hidden"], s["dim"] // s["heads"]
    kv_dim = head_dim * s["kv_heads"]
    partial = Path(str(path) + ".partial")
    writer = gguf.GGUFWriter(str(partial), s["arch"])
    writer.add_name(f"qjit synthetic {s['arch']} {shape_name} (random weights)")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(4096)
    writer.add_embedding_length(dim)
    writer.add_block_count(s["layers"])
    writer.add_feed_forward_length(hidden)
    writer.add_head_count(s["heads"])
    writer.add_head_count_kv(s["kv_heads"])
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(s["rope_base"])
    writer.add_layer_norm_rms_eps(1e-5)
    vocab = copy_tokenizer(writer, tokenizer_file)
    writer.add_vocab_size(vocab)

    # (name, numpy shape rows x columns, is F32: norms and biases); ggml's order of a converted file.
    tensors = [("token_embd.weight", (vocab, dim), False)]
    for l in range(s["layers"]):
        tensors += [(f"blk.{l}.attn_norm.weight", (dim,), True),
                    (f"blk.{l}.attn_q.weight", (dim, dim), False),
                    (f"blk.{l}.attn_k.weight", (kv_dim, dim), False),
                    (f"blk.{l}.attn_v.weight", (kv_dim, dim), False)]
        if s["arch"] == "qwen2":
            tensors += [(f"blk.{l}.attn_{m}.bias", (size,), True) for m, size in (("q", dim), ("k", kv_dim), ("v", kv_dim))]
        tensors += [(f"blk.{l}.attn_output.weight", (dim, dim), False),
                    (f"blk.{l}.ffn_norm.weight", (dim,), True),
                    (f"blk.{l}.ffn_gate.weight", (hidden, dim), False),
                    (f"blk.{l}.ffn_up.weight", (hidden, dim), False),
                    (f"blk.{l}.ffn_down.weight", (dim, hidden), False)]
    tensors += [("output_norm.weight", (dim,), True), ("output.weight", (vocab, dim), False)]
    for name, shape, norm in tensors:
        dtype = np.float32 if norm else np.float16
        writer.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape, norm in tensors:
        if name.endswith(".bias"):
            data = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        elif norm:
            data = np.ones(shape, dtype=np.float32)
        else:
            data = rng.standard_normal(shape, dtype=np.float32)
            data *= 0.02
            data = data.astype(np.float16)
        writer.write_tensor_data(data)
        del data
    writer.close()
    partial.rename(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help=f"comma-separated SHAPE-TYPE (shapes {','.join(SHAPES)}; types llama-quantize's), "
                             f"default {DEFAULT_MODELS}")
    parser.add_argument("--out-dir", default=str(ROOT / "build" / "peers" / "models"))
    parser.add_argument("--tokenizer-from", help="GGUF file whose tokenizer.* keys are copied")
    parser.add_argument("--keep-f16", action="store_true", help="keep the F16 intermediate files")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="run qjit-run --generate 4 on each file")
    args = parser.parse_args()

    wanted = {}
    for spec in filter(None, args.models.split(",")):
        shape, _, type_name = spec.partition("-")
        if shape not in SHAPES or not type_name:
            sys.exit(f"make_llama_gguf: bad model {spec!r}: expected SHAPE-TYPE with SHAPE one of {', '.join(SHAPES)}")
        wanted.setdefault(shape, []).append(type_name)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_file = args.tokenizer_from or default_tokenizer_file()

    outputs = []
    for shape, types in wanted.items():
        f16 = out_dir / f"{file_stem(shape)}.F16.gguf"
        targets = [(t, out_dir / f"{file_stem(shape)}.{t}.gguf") for t in types]
        missing = [(t, p) for t, p in targets if not p.exists()]
        if missing:
            if not f16.exists():
                started = time.time()
                log(f"writing {f16} (tokenizer from {tokenizer_file})")
                write_f16(f16, shape, tokenizer_file, args.seed)
                log(f"wrote {f16.stat().st_size / 1e9:.2f} GB in {time.time() - started:.0f} s")
            for type_name, path in missing:
                started = time.time()
                log(f"quantizing to {path}")
                quantize(f16, path, type_name)
                log(f"wrote {path.stat().st_size / 1e9:.2f} GB in {time.time() - started:.0f} s")
            if not args.keep_f16 and "F16" not in types:
                f16.unlink()
        outputs += [p for _, p in targets]

    for path in outputs:
        if args.check:
            qjit = ROOT / "build" / "tools" / "qjit-run"
            done = subprocess.run([str(qjit), "--model", str(path), "--generate", "4", "--prompt-tokens", "1,2,3",
                                   "--json"], capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"make_llama_gguf: qjit-run refuses {path}: {done.stderr.strip()}")
            log(f"qjit-run loads {path.name}")
        print(path)


if __name__ == "__main__":
    main()
