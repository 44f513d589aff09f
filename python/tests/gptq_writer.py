"""GPTQ tensors and checkpoint directories written with numpy, following the format's published
description (AutoGPTQ / GPTQModel), independently of qjit's C++ code: the oracle of the import tests."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import numpy as np


@dataclass
class GptqLayer:
    codes: np.ndarray  # [K, N] integers 0 .. 2^bits - 1
    zeros: np.ndarray  # [G, N] integer zero points
    scales: np.ndarray  # [G, N] float16
    g_idx: np.ndarray  # [K] int32 group of each row
    bits: int

    def dequantize(self) -> np.ndarray:
        """W[k][n] = scale[g][n] * (q[k][n] - zero[g][n]), g = g_idx[k], in float64."""
        g = self.g_idx
        return self.scales.astype(np.float64)[g] * (self.codes.astype(np.float64) - self.zeros.astype(np.float64)[g])


def round_to_nearest(w_kn: np.ndarray, bits: int, group_size: int, symmetric: bool = False,
                     act_order_seed: Optional[int] = None) -> GptqLayer:
    """Min-max round-to-nearest quantization of a K x N matrix in groups of rows. With act_order_seed,
    rows are assigned to groups in a shuffled order (as GPTQ's act-order writes g_idx)."""
    k, n = w_kn.shape
    group = k if group_size == -1 else group_size
    order = np.arange(k) if act_order_seed is None else np.random.default_rng(act_order_seed).permutation(k)
    g_idx = np.empty(k, dtype=np.int32)
    g_idx[order] = np.arange(k) // group
    groups = -(-k // group)
    top = 2**bits - 1
    scales = np.empty((groups, n), dtype=np.float16)
    zeros = np.empty((groups, n), dtype=np.int64)
    codes = np.empty((k, n), dtype=np.int64)
    for g in range(groups):
        rows = np.flatnonzero(g_idx == g)
        block = w_kn[rows].astype(np.float64)
        if symmetric:
            zero = np.full(n, 2 ** (bits - 1))
            scale = np.maximum(np.abs(block).max(axis=0) / 2 ** (bits - 1), 1e-8)
        else:
            lo, hi = np.minimum(block.min(axis=0), 0), np.maximum(block.max(axis=0), 0)
            scale = np.maximum((hi - lo) / top, 1e-8)
            zero = np.clip(np.round(-lo / scale), 0, top)
        scales[g] = scale.astype(np.float16)
        zeros[g] = zero
        codes[rows] = np.clip(np.round(block / scales[g].astype(np.float64) + zero), 0, top)
    return GptqLayer(codes, zeros, scales, g_idx, bits)


def pack_along_first_axis(values: np.ndarray, bits: int) -> np.ndarray:
    """Values [R, C] packed into int32 words along R: value i at bit bits * i of the bit stream."""
    rows, cols = values.shape
    words = np.zeros(((rows * bits + 31) // 32, cols), dtype=np.uint64)
    for r in range(rows):
        bit = r * bits
        word, shift = divmod(bit, 32)
        v = values[r].astype(np.uint64)
        words[word] |= (v << np.uint64(shift)) & np.uint64(0xFFFFFFFF)
        if shift + bits > 32:  # a 3-bit value straddling two words
            words[word + 1] |= v >> np.uint64(32 - shift)
    return words.astype(np.uint32).view(np.int32)


def pack(layer: GptqLayer, checkpoint_format: str = "gptq") -> Dict[str, np.ndarray]:
    """qweight, qzeros, scales and g_idx as a checkpoint stores them. The v1 format ("gptq") stores
    zero - 1, subtracted from each whole word (one per field, with borrows) but per field for 3 bits."""
    qweight = pack_along_first_axis(layer.codes, layer.bits)
    zeros = layer.zeros
    if checkpoint_format == "gptq" and layer.bits == 3:
        zeros = (zeros - 1) % 8
    qzeros = pack_along_first_axis(zeros.T, layer.bits).T.copy()
    if checkpoint_format == "gptq" and layer.bits != 3:
        ones = pack_along_first_axis(np.ones_like(zeros.T), layer.bits).T.view(np.uint32).astype(np.int64)
        qzeros = ((qzeros.view(np.uint32).astype(np.int64) - ones) % 2**32).astype(np.uint32).view(np.int32)
    return {"qweight": qweight, "qzeros": np.ascontiguousarray(qzeros), "scales": layer.scales, "g_idx": layer.g_idx}


_SAFETENSORS_DTYPES = {np.dtype(np.int32): "I32", np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}


def write_safetensors(path: Path, tensors: Dict[str, np.ndarray]) -> None:
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_checkpoint(directory: Path, layers: Dict[str, GptqLayer], group_size: int, symmetric: bool,
                     act_order: bool = False, checkpoint_format: str = "gptq",
                     extra: Optional[Dict[str, np.ndarray]] = None) -> Path:
    """A checkpoint directory: config.json with its quantization_config and one model.safetensors."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    bits = {layer.bits for layer in layers.values()}
    assert len(bits) == 1, "one width per checkpoint"
    tensors = dict(extra or {})
    for name, layer in layers.items():
        for field, array in pack(layer, checkpoint_format).items():
            tensors[f"{name}.{field}"] = array
    config = {"quantization_config": {"quant_method": "gptq", "bits": bits.pop(), "group_size": group_size,
                                      "desc_act": act_order, "sym": symmetric,
                                      "checkpoint_format": checkpoint_format}}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    write_safetensors(directory / "model.safetensors", tensors)
    return directory
