#!/usr/bin/env python3
"""An independent fp32 forward of a Gemma 3 GGUF file: the exact weights' NLL, without llama.cpp.

The weights are dequantized with the gguf package's own numpy dequantizers (the package llama.cpp
publishes); the forward is Gemma 3 as llama.cpp's gemma3 graph runs it: the embedding times
sqrt(dim), per layer RMSNorm, q/k/v, per-head RMSNorms of q and k, NeoX RoPE (halves' pairs; base
rope.freq_base_swa or 10000 on local layers, rope.freq_base on every sixth, global, layer), causal
attention scaled by 1/sqrt(head size) (local layers within the sliding window), wo, its RMSNorm,
the residual add, RMSNorm, gelu_tanh(x W_gate) * (x W_up) W_down, its RMSNorm, the residual add;
the final norm and the tied classifier. RMSNorm is accumulated in float64, the products in float32,
softmax and the NLL in float64. Writes per_sequence_nll_sum and mean_nll as JSON.

  PYTHONPATH=.../gguf-py python3 bench/gemma3_fp32_reference.py --model gemma-3-270m-q4_k_m.gguf \\
      --tokens tests/data/gemma3-270m/eval.seq.u32 --count 40 --out eval_fp32_reference.json
  (--concatenate 900: one sequence of the first 900 tokens of all, past the sliding window)
"""
import argparse
import json
import struct
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def read_sequences(path):
    data = open(path, "rb").read()
    count = struct.unpack("<I", data[:4])[0]
    lengths = struct.unpack(f"<{count}I", data[4 : 4 + 4 * count])
    tokens = np.frombuffer(data[4 + 4 * count :], dtype="<u4").astype(np.int64)
    starts = np.cumsum((0,) + lengths)
    return [tokens[starts[i] : starts[i + 1]] for i in range(count)]


class Gemma3:
    def __init__(self, path):
        reader = gguf.GGUFReader(path)
        field = lambda key: reader.fields[key].contents() if key in reader.fields else None
        self.dim = field("gemma3.embedding_length")
        self.layers = field("gemma3.block_count")
        self.heads = field("gemma3.attention.head_count")
        self.kv_heads = field("gemma3.attention.head_count_kv")
        self.head_size = field("gemma3.attention.key_length")
        self.eps = field("gemma3.attention.layer_norm_rms_epsilon")
        self.base = field("gemma3.rope.freq_base")
        self.window = field("gemma3.attention.sliding_window") or 0
        self.pattern = field("gemma3.attention.sliding_window_pattern") or 6
        self.local_base = field("gemma3.rope.freq_base_swa") or 10000.0
        tensors = {t.name: t for t in reader.tensors}

        def weight(name):
            t = tensors[name]
            values = dequantize(t.data, t.tensor_type).astype(np.float32)
            return values.reshape([int(d) for d in reversed(t.shape)])

        self.embedding = weight("token_embd.weight")  # [vocab][dim]
        names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
                 "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"]
        self.blocks = [{n: weight(f"blk.{l}.{n}.weight") for n in names} for l in range(self.layers)]
        self.output_norm = weight("output_norm.weight")

    def rms(self, x, w):
        x64 = x.astype(np.float64)
        return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + self.eps) * w).astype(np.float32)

    def rope(self, x, positions, base):  # x: [T][heads][head_size], pairs (i, i + head_size / 2)
        half = self.head_size // 2
        angles = positions[:, None].astype(np.float64) * base ** (-2.0 * np.arange(half) / self.head_size)
        cos = np.cos(angles).astype(np.float32)[:, None, :]
        sin = np.sin(angles).astype(np.float32)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    @staticmethod
    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (x + np.float32(0.044715) * x**3)))

    def logits(self, tokens):
        count, hs = len(tokens), self.head_size
        positions = np.arange(count)
        x = self.embedding[tokens] * np.sqrt(np.float32(self.dim))
        for l, w in enumerate(self.blocks):
            local = self.window > 0 and l % self.pattern < self.pattern - 1
            base = self.local_base if local else self.base
            h = self.rms(x, w["attn_norm"])
            q = self.rope(self.rms((h @ w["attn_q"].T).reshape(count, self.heads, hs), w["attn_q_norm"]), positions, base)
            k = self.rope(self.rms((h @ w["attn_k"].T).reshape(count, self.kv_heads, hs), w["attn_k_norm"]), positions, base)
            v = (h @ w["attn_v"].T).reshape(count, self.kv_heads, hs)
            group = self.heads // self.kv_heads
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("thd,shd->hts", q, k).astype(np.float64) / np.sqrt(hs)
            masked = positions[None, :] > positions[:, None]
            if local:
                masked |= positions[:, None] - positions[None, :] >= self.window
            scores = np.where(masked[None], -np.inf, scores)
            p = np.exp(scores - scores.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            attended = np.einsum("hts,shd->thd", p.astype(np.float32), v).reshape(count, self.heads * hs)
            x = x + self.rms(attended @ w["attn_output"].T, w["post_attention_norm"])
            h = self.rms(x, w["ffn_norm"])
            ffn = (self.gelu(h @ w["ffn_gate"].T) * (h @ w["ffn_up"].T)) @ w["ffn_down"].T
            x = x + self.rms(ffn, w["post_ffw_norm"])
        return (self.rms(x, self.output_norm) @ self.embedding.T).astype(np.float64)


def sequence_nll(logits, tokens):
    most = logits.max(-1, keepdims=True)
    log_norm = most[:, 0] + np.log(np.exp(logits - most).sum(-1))
    return float(np.sum(log_norm[:-1] - logits[np.arange(len(tokens) - 1), tokens[1:]]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--count", type=int, default=40, help="the first COUNT sequences")
    parser.add_argument("--concatenate", type=int, default=0, metavar="N",
                        help="score one sequence instead: the first N tokens of all sequences joined in order "
                             "(longer than the sliding window)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    model = Gemma3(args.model)
    sequences = read_sequences(args.tokens)
    if args.concatenate > 0:
        sequences = [np.concatenate(sequences)[: args.concatenate]]
    sequences = sequences[: args.count]
    sums = []
    for i, tokens in enumerate(sequences):
        sums.append(sequence_nll(model.logits(tokens), tokens))
        print(f"\r{i + 1}/{len(sequences)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    predicted = sum(len(s) - 1 for s in sequences)
    result = {"sequences": len(sequences), "predicted_tokens": predicted, "mean_nll": round(sum(sums) / predicted, 8),
              "gguf": gguf.__version__ if hasattr(gguf, "__version__") else "gguf-py",
              "command": "python3 bench/gemma3_fp32_reference.py " + " ".join(sys.argv[1:]),
              "per_sequence_nll_sum": [round(s, 6) for s in sums]}
    with open(args.out, "w") as f:
        json.dump(result, f)
        f.write("\n")
    print(json.dumps({k: v for k, v in result.items() if k != "per_sequence_nll_sum"}))


if __name__ == "__main__":
    main()
