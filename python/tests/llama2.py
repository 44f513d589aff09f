"""A llama2.c model (karpathy's run.c semantics) in numpy, with a pluggable function per weight
matrix, plus greedy decoding and the NLL evaluation of shared/models/README.md."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

BOS = 1
MATRICES = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")  # per layer, each [out][in]
EPS = 1e-5  # RMSNorm's

# A linear as the model calls it: y = x W^T for x of shape (T, in). make_linear(name, w) builds one
# from a matrix w [out][in]; names are "layers.<i>.<matrix>" and "classifier".
LinearFn = Callable[[np.ndarray], np.ndarray]
MakeLinear = Callable[[str, np.ndarray], LinearFn]


def dense(name: str, w: np.ndarray) -> LinearFn:
    """The fp32 linear: x @ w.T."""
    w_t = np.ascontiguousarray(w.T)
    return lambda x: x @ w_t


@dataclass(frozen=True)
class Config:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int

    @property
    def head_size(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_size


def load_checkpoint(path: str | Path) -> tuple[Config, Dict[str, np.ndarray]]:
    """A llama2.c v0 ("legacy") checkpoint with a shared classifier: its config and float32 weights,
    keyed token_embedding, rms_att, wq .. w3 (stacked over layers), rms_ffn and rms_final."""
    data = np.fromfile(path, dtype=np.uint8)
    config = Config(*(int(v) for v in data[:28].view(np.int32)))
    if config.vocab_size <= 0:
        raise ValueError(f"{path}: a separate classifier (negative vocab_size) is not supported")
    c = config
    layers, dim, hidden, kv = c.n_layers, c.dim, c.hidden_dim, c.kv_dim
    shapes = {"token_embedding": (c.vocab_size, dim), "rms_att": (layers, dim), "wq": (layers, dim, dim),
              "wk": (layers, kv, dim), "wv": (layers, kv, dim), "wo": (layers, dim, dim), "rms_ffn": (layers, dim),
              "w1": (layers, hidden, dim), "w2": (layers, dim, hidden), "w3": (layers, hidden, dim),
              "rms_final": (dim,), "freq_cis": (2, c.seq_len, c.head_size // 2)}  # the RoPE tables: unused
    floats = data[28:].view(np.float32)
    expected = sum(int(np.prod(shape)) for shape in shapes.values())
    if floats.size != expected:
        raise ValueError(f"{path}: {floats.size} floats after the header, expected {expected}")
    weights, offset = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape))
        weights[name] = floats[offset:offset + size].reshape(shape)
        offset += size
    del weights["freq_cis"]
    return config, weights


def rmsnorm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(EPS)) * weight


def rope(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Rotates the adjacent pairs (2i, 2i + 1) of each head of x [T, heads, head_size] by
    position * 10000^(-2i / head_size)."""
    head_size = x.shape[-1]
    angle = positions[:, None] * 10000.0 ** (-np.arange(0, head_size, 2) / head_size)
    cos, sin = np.cos(angle).astype(np.float32)[:, None], np.sin(angle).astype(np.float32)[:, None]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


class Llama2:
    """The forward pass, with a KV cache: ``forward(tokens)`` appends tokens after those already
    seen (``reset()`` forgets them) and returns their logits [T, vocab]."""

    def __init__(self, config: Config, weights: Dict[str, np.ndarray], make_linear: MakeLinear = dense) -> None:
        self.config = config
        self.weights = weights
        self.layers: List[Dict[str, LinearFn]] = [
            {m: make_linear(f"layers.{i}.{m}", weights[m][i]) for m in MATRICES} for i in range(config.n_layers)]
        self.classifier = make_linear("classifier", weights["token_embedding"])
        self.reset()

    def reset(self) -> None:
        empty = np.zeros((0, self.config.n_kv_heads, self.config.head_size), dtype=np.float32)
        self.keys = [empty] * self.config.n_layers
        self.values = [empty] * self.config.n_layers

    def forward(self, tokens) -> np.ndarray:
        c, w = self.config, self.weights
        start, count = self.keys[0].shape[0], len(tokens)
        positions = np.arange(start, start + count)
        # Query t sees keys 0 .. start + t.
        mask = np.where(np.arange(start + count)[None, :] <= positions[:, None], 0, -np.inf).astype(np.float32)
        scale = np.float32(1 / np.sqrt(c.head_size))
        x = w["token_embedding"][np.asarray(tokens)]
        for i, linear in enumerate(self.layers):
            h = rmsnorm(x, w["rms_att"][i])
            q = rope(linear["wq"](h).reshape(count, c.n_heads, c.head_size), positions)
            k = rope(linear["wk"](h).reshape(count, c.n_kv_heads, c.head_size), positions)
            v = linear["wv"](h).reshape(count, c.n_kv_heads, c.head_size)
            self.keys[i] = np.concatenate([self.keys[i], k])
            self.values[i] = np.concatenate([self.values[i], v])
            # Grouped-query attention: query head j reads kv head j // (n_heads / n_kv_heads).
            group = c.n_heads // c.n_kv_heads
            keys = np.repeat(self.keys[i], group, axis=1).transpose(1, 2, 0)  # [heads, head_size, S]
            values = np.repeat(self.values[i], group, axis=1).transpose(1, 0, 2)  # [heads, S, head_size]
            scores = q.transpose(1, 0, 2) @ keys * scale + mask  # [heads, T, S]
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attention = scores / scores.sum(axis=-1, keepdims=True)
            x = x + linear["wo"]((attention @ values).transpose(1, 0, 2).reshape(count, c.dim))
            h = rmsnorm(x, w["rms_ffn"][i])
            gate = linear["w1"](h)
            x = x + linear["w2"](gate / (1 + np.exp(-gate)) * linear["w3"](h))  # SwiGLU
        return self.classifier(rmsnorm(x, w["rms_final"]))


def greedy_decode(model: Llama2, steps: int) -> List[int]:
    """BOS followed by ``steps`` argmax tokens, one forward of one token each."""
    model.reset()
    tokens = [BOS]
    for _ in range(steps):
        tokens.append(int(np.argmax(model.forward(tokens[-1:])[-1])))
    return tokens


@dataclass(frozen=True)
class NllResult:
    mean: float  #: nats per predicted token
    sequence_sums: np.ndarray  #: each sequence's summed NLL
    tokens: int  #: predicted tokens: every token after each BOS


def evaluate_nll(model: Llama2, tokens: np.ndarray) -> NllResult:
    """NLL of a stream of BOS-led sequences, each token predicted from its own prefix in its own
    sequence (the cache restarts at each BOS); log-softmax in float64."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size == 0 or tokens[0] != BOS:
        raise ValueError("the token stream must start with BOS")
    sums, predicted = [], 0
    for sequence in np.split(tokens, np.flatnonzero(tokens == BOS)[1:]):
        model.reset()
        logits = model.forward(sequence[:-1]).astype(np.float64)
        top = logits.max(axis=-1)
        log_z = top + np.log(np.exp(logits - top[:, None]).sum(axis=-1))
        sums.append(float(np.sum(log_z - logits[np.arange(len(sequence) - 1), sequence[1:]])))
        predicted += len(sequence) - 1
    return NllResult(sum(sums) / predicted, np.array(sums), predicted)
