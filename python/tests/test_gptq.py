"""qjit.Linear.from_gptq against the numpy GPTQ writer (gptq_writer.py): every width, both
checkpoint formats, act-order, symmetric zero points, scale types, compensators, and shape errors."""

from __future__ import annotations

import numpy as np
import pytest

import qjit
from conftest import assert_forward_matches
from gptq_writer import pack, round_to_nearest


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("checkpoint_format", ["gptq", "gptq_v2"])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("act_order", [False, True])
def test_import_reproduces_the_written_matrix(exact_context, rng, bits, checkpoint_format, symmetric, act_order):
    k, n, group = 200, 72, 64  # K not a multiple of the group; N not of the packing (3-bit: 32 / 3)
    written = round_to_nearest(rng.standard_normal((k, n), dtype=np.float32), bits, group, symmetric,
                               act_order_seed=7 if act_order else None)
    tensors = pack(written, checkpoint_format)
    layer = qjit.Linear.from_gptq(exact_context, tensors["qweight"], tensors["qzeros"], tensors["scales"],
                                  tensors["g_idx"], bits=bits, group_size=group, checkpoint_format=checkpoint_format)
    info = layer.info
    assert (info.k, info.n, info.bits, info.act_order, info.symmetric) == (k, n, bits, act_order, symmetric)
    np.testing.assert_array_equal(layer.dequantize(), written.dequantize().astype(np.float32))
    x = rng.standard_normal((3, k), dtype=np.float32)
    assert_forward_matches(layer, x, layer(x), int8_activations=False)


def test_shapes_tell_k_and_the_group_size(exact_context, rng):
    written = round_to_nearest(rng.standard_normal((256, 40), dtype=np.float32), 4, 128)
    tensors = pack(written)
    layer = qjit.Linear.from_gptq(exact_context, tensors["qweight"], tensors["qzeros"], tensors["scales"])
    assert (layer.info.k, layer.info.group_size) == (256, 128)
    np.testing.assert_array_equal(layer.dequantize(), written.dequantize().astype(np.float32))


@pytest.mark.parametrize("scale_dtype", ["float32", "bfloat16"])
def test_float32_and_bfloat16_scales(exact_context, rng, scale_dtype):
    written = round_to_nearest(rng.standard_normal((128, 40), dtype=np.float32), 4, 32)
    tensors = pack(written)
    if scale_dtype == "float32":
        scales = tensors["scales"].astype(np.float32)
    else:
        torch = pytest.importorskip("torch")
        scales = torch.from_numpy(tensors["scales"].astype(np.float32)).to(torch.bfloat16)
        written.scales = scales.float().numpy()
    layer = qjit.Linear.from_gptq(exact_context, tensors["qweight"], tensors["qzeros"], scales, bits=4, group_size=32)
    np.testing.assert_array_equal(layer.dequantize(), written.dequantize().astype(np.float32))


def test_a_compensator_is_added(exact_context, rng):
    k, n, rank = 128, 48, 6
    written = round_to_nearest(rng.standard_normal((k, n), dtype=np.float32), 4, 32)
    tensors = pack(written)
    u = rng.standard_normal((k, rank), dtype=np.float32) * 0.1
    v = rng.standard_normal((rank, n), dtype=np.float32) * 0.1
    layer = qjit.Linear.from_gptq(exact_context, tensors["qweight"], tensors["qzeros"], tensors["scales"],
                                  bits=4, group_size=32, low_rank=(u, v), low_rank_bits=16)
    assert layer.info.low_rank == rank
    expected = written.dequantize() + u.astype(np.float64) @ v
    assert np.abs(layer.dequantize() - expected).max() < 1e-3  # U and V stored in fp16


@pytest.mark.parametrize("change,needle", [
    (lambda t: {**t, "qweight": t["qweight"][:-1]}, "qweight: shape"),
    (lambda t: {**t, "qzeros": t["qzeros"][:, :-1]}, "qzeros: shape"),
    (lambda t: {**t, "scales": t["scales"][:-1]}, "scales: shape"),
    (lambda t: {**t, "g_idx": t["g_idx"][:-1]}, "g_idx: shape"),
    (lambda t: {**t, "qweight": t["qweight"].astype(np.int64)}, "qweight: dtype int64, expected int32"),
    (lambda t: {**t, "scales": t["scales"].astype(np.int32)}, "scales: dtype int32"),
    (lambda t: {**t, "g_idx": np.full_like(t["g_idx"], 9)}, "g_idx"),
])
def test_inconsistent_tensors_are_refused_by_name(exact_context, rng, change, needle):
    written = round_to_nearest(rng.standard_normal((128, 40), dtype=np.float32), 4, 32)
    t = change(pack(written))
    with pytest.raises(qjit.InvalidArgumentError, match=needle):
        qjit.Linear.from_gptq(exact_context, t["qweight"], t["qzeros"], t["scales"], t["g_idx"], bits=4,
                              group_size=32, k=128)


def test_three_bits_without_g_idx_need_k(exact_context, rng):
    tensors = pack(round_to_nearest(rng.standard_normal((100, 40), dtype=np.float32), 3, 32))
    with pytest.raises(qjit.InvalidArgumentError, match="needs k"):
        qjit.Linear.from_gptq(exact_context, tensors["qweight"], tensors["qzeros"], tensors["scales"], bits=3)
    layer = qjit.Linear.from_gptq(exact_context, tensors["qweight"], tensors["qzeros"], tensors["scales"], bits=3,
                                  k=100, group_size=32)
    assert layer.info.k == 100
