"""qjit.Linear.from_gguf against the gguf package (llama.cpp's gguf-py), the independent oracle: for
every imported type, random blocks dequantize bit for bit as gguf.quants.dequantize does; forwards
match the layer's matrix; other types and sizes are refused; and, when the SmolLM2 GGUF file is
there (scripts/fetch_model.sh), one of its Q4_1 tensors read with gguf.GGUFReader."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import qjit
from conftest import assert_forward_matches

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install gguf)")
if not hasattr(getattr(gguf, "quants", None), "dequantize"):
    pytest.skip(f"gguf {getattr(gguf, '__version__', '?')} has no quants.dequantize (gguf >= 0.10 has)",
                allow_module_level=True)

Q = gguf.GGMLQuantizationType

# Byte offsets in each block of its fp16 fields (d, m, dmin), set to finite values.
HALF_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
    Q.IQ4_NL: [0], Q.IQ4_XS: [0],
}
SHAPES = [(1, 1), (1, 7), (1, 33), (3, 1), (3, 7), (3, 33)]  # (blocks along K, N)


def random_halves(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Finite fp16 values as bytes: both signs, zeros, subnormals, tiny and up to 65504."""
    sign = rng.integers(0, 2, shape, dtype=np.uint16) << 15
    exponent = rng.integers(0, 31, shape, dtype=np.uint16)  # 0: zero or subnormal; 31 (inf, nan) never
    mantissa = rng.integers(0, 1024, shape, dtype=np.uint16)
    bits = sign | exponent << 10 | mantissa
    bits[rng.random(shape) < 0.1] &= 0x8000  # signed zeros: a zero scale or min
    return bits.view(np.uint8).reshape(shape + (2,))


def random_tensor(rng: np.random.Generator, qtype: Q, k: int, n: int) -> np.ndarray:
    """n rows of k values of qtype, as GGUF stores them: random bytes, finite fp16 fields."""
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n, k // block_values, block_bytes), dtype=np.uint8)
    for offset in HALF_FIELDS[qtype]:
        blocks[:, :, offset:offset + 2] = random_halves(rng, blocks.shape[:2])
    return blocks.reshape(n, -1)


def assert_bits_equal(k_by_n: np.ndarray, n_by_k: np.ndarray) -> None:
    """The layer's K x N matrix is ggml's N x K one transposed, bit for bit (signed zeros too)."""
    assert k_by_n.dtype == np.float32 and n_by_k.dtype == np.float32
    np.testing.assert_array_equal(np.ascontiguousarray(k_by_n.T).view(np.uint32), n_by_k.view(np.uint32))


@pytest.mark.parametrize("qtype", list(HALF_FIELDS), ids=lambda q: q.name)
def test_dequantizes_as_gguf_bit_for_bit(exact_context, rng, qtype):
    block_values = gguf.GGML_QUANT_SIZES[qtype][0]
    for blocks, n in SHAPES:
        k = blocks * block_values
        data = random_tensor(rng, qtype, k, n)
        layer = qjit.Linear.from_gguf(exact_context, qtype, data, k, n)
        assert (layer.info.k, layer.info.n) == (k, n)
        assert_bits_equal(layer.dequantize(), gguf.quants.dequantize(data, qtype))
        assert f'source="GGUF {qtype.name} as ' in layer.describe()


@pytest.mark.parametrize("qtype", list(HALF_FIELDS), ids=lambda q: q.name)
def test_forwards_match_the_matrix(exact_context, default_context, rng, qtype):
    k = 2 * gguf.GGML_QUANT_SIZES[qtype][0]
    data = random_tensor(rng, qtype, k, 33)
    for context, int8 in ((exact_context, False), (default_context, True)):
        layer = qjit.Linear.from_gguf(context, qtype.name, data.tobytes(), k, 33)  # by name, from bytes
        for m in (1, 5):
            x = rng.standard_normal((m, k), dtype=np.float32)
            assert_forward_matches(layer, x, layer(x), int8_activations=int8)


def test_refuses_other_types_and_sizes(exact_context):
    data = np.zeros(1 << 12, np.uint8)
    for qtype in (Q.F32, Q.F16, Q.BF16, Q.Q8_1, Q.Q8_K, Q.IQ2_XXS, Q.IQ3_S, Q.TQ1_0):
        with pytest.raises(qjit.UnsupportedError, match=f"importing ggml {qtype.name} tensors is not supported"):
            qjit.Linear.from_gguf(exact_context, qtype, data[:256], 256, 1)
    with pytest.raises(qjit.InvalidArgumentError, match="ggml_type is 'IQ2_XS'"):
        qjit.Linear.from_gguf(exact_context, "IQ2_XS", data, 256, 1)
    with pytest.raises(qjit.InvalidArgumentError, match=r"holds N \* \(K / 32\) \* 18 = 108 bytes; 107 were given"):
        qjit.Linear.from_gguf(exact_context, Q.Q4_0, data[:107], 64, 3)
    with pytest.raises(qjit.InvalidArgumentError, match="k = 128 is not a whole number of Q4_K blocks"):
        qjit.Linear.from_gguf(exact_context, Q.Q4_K, data[:144], 128, 1)
    with pytest.raises(qjit.InvalidArgumentError, match="data: dtype int32"):
        qjit.Linear.from_gguf(exact_context, Q.Q4_0, np.zeros(9, np.int32), 32, 1)


def model_path() -> Path:
    folder = os.environ.get("QJIT_MODEL_DIR") or Path.home() / ".cache/qjit/models"
    return Path(folder) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_q4_1_tensor_of_the_model(exact_context):
    if not model_path().exists():
        pytest.skip(f"{model_path()} is absent: run scripts/fetch_model.sh")
    reader = gguf.GGUFReader(model_path())
    tensor = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    assert tensor.tensor_type == Q.Q4_1
    k, n = (int(d) for d in tensor.shape)  # innermost first: K = 576 inputs, N = 1536 outputs
    assert (k, n) == (576, 1536)
    layer = qjit.Linear.from_gguf(exact_context, tensor.tensor_type, tensor.data, k, n)
    assert_bits_equal(layer.dequantize(), gguf.quants.dequantize(tensor.data, tensor.tensor_type))


def test_the_model_file_as_a_checkpoint(exact_context):
    """qjit.Checkpoint on the SmolLM2 GGUF file: every quantized matrix is a layer named as its tensor,
    and a layer made from it dequantizes as gguf does."""
    if not model_path().exists():
        pytest.skip(f"{model_path()} is absent: run scripts/fetch_model.sh")
    reader = gguf.GGUFReader(model_path())
    imported = {t.name: t for t in reader.tensors if len(t.shape) == 2 and t.tensor_type in HALF_FIELDS}
    with qjit.Checkpoint(exact_context, model_path()) as checkpoint:
        assert set(checkpoint) == set(imported)
        info = checkpoint["blk.0.ffn_up.weight"]
        assert (info.k, info.n, info.checkpoint_format, info.ggml_type) == (576, 1536, "gguf", int(Q.Q4_1))
        assert info.checkpoint_bytes == imported["blk.0.ffn_up.weight"].n_bytes
        layer = checkpoint.create("blk.0.ffn_up.weight")
    tensor = imported["blk.0.ffn_up.weight"]
    assert_bits_equal(layer.dequantize(), gguf.quants.dequantize(tensor.data, tensor.tensor_type))
