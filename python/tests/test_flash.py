"""qjit.NeuronFileWriter and qjit.FlashFfn: neuron files written from numpy weights, FFN forwards
against numpy's on every neuron and on subsets, counters, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import qjit

D_MODEL, D_FF = 64, 96


def silu(v: np.ndarray) -> np.ndarray:
    return v / (1.0 + np.exp(-v))


def swiglu_reference(x, up, gate, down, active=None):
    """The SwiGLU FFN in float64 over the `active` neurons (all by default)."""
    if active is not None:
        up, gate, down = up[:, active], gate[:, active], down[active, :]
    x = x.astype(np.float64)
    return (silu(x @ gate) * (x @ up)) @ down


def random_swiglu(rng, layers):
    """fp16-representable weights, so an fp16 neuron file holds them exactly."""
    def matrix(rows, columns):
        return (rng.standard_normal((rows, columns)) * 0.2).astype(np.float16).astype(np.float32)
    return [(matrix(D_MODEL, D_FF), matrix(D_MODEL, D_FF), matrix(D_FF, D_MODEL)) for _ in range(layers)]


@pytest.fixture
def swiglu_file(tmp_path, rng):
    weights = random_swiglu(rng, 2)
    path = tmp_path / "ffn.qjitn"
    with qjit.NeuronFileWriter(path, layers=2, d_model=D_MODEL, d_ff=D_FF, activation="swiglu", f16=True) as writer:
        for up, gate, down in weights:
            writer.add_layer(up, down, gate=gate)
    return path, weights


@pytest.mark.parametrize("batch", [(1,), (3,), (2, 5)])
def test_every_neuron_and_subsets_match_numpy(exact_context, swiglu_file, rng, batch):
    path, weights = swiglu_file
    ffn = qjit.FlashFfn(exact_context, path, dram_budget_bytes=0, direct_io=False)
    for layer, (up, gate, down) in enumerate(weights):
        x = rng.standard_normal(batch + (D_MODEL,), dtype=np.float32)
        flat = x.reshape(-1, D_MODEL)
        y = ffn(layer, x)
        assert y.shape == x.shape and y.dtype == np.float32
        np.testing.assert_allclose(y.reshape(-1, D_MODEL), swiglu_reference(flat, up, gate, down), rtol=1e-4, atol=1e-4)
        active = np.array([0, 5, 17, 40, D_FF - 1], dtype=np.int32)
        y_active = ffn.forward(layer, x, active=active)
        np.testing.assert_allclose(y_active.reshape(-1, D_MODEL), swiglu_reference(flat, up, gate, down, active),
                                   rtol=1e-4, atol=1e-4)


def test_info_and_counters(exact_context, swiglu_file, rng):
    path, _ = swiglu_file
    ffn = qjit.FlashFfn(exact_context, path, direct_io=False)
    info = ffn.info
    assert (info.layers, info.d_model, info.d_ff, info.activation) == (2, D_MODEL, D_FF, "swiglu")
    assert info.format == "f16" and info.bundled and info.record_bytes > 0
    ffn(0, rng.standard_normal((1, D_MODEL), dtype=np.float32))
    counters = ffn.counters()
    assert counters.tokens == 1 and counters.active_neurons == D_FF
    assert counters.neurons_loaded == D_FF and counters.bytes_read >= D_FF * 3 * D_MODEL * 2
    ffn.reset_counters()
    assert ffn.counters().tokens == 0


def test_quantized_relu_file_with_bias_stays_close(exact_context, tmp_path, rng):
    up = rng.standard_normal((D_MODEL, D_FF), dtype=np.float32)
    down = rng.standard_normal((D_FF, D_MODEL), dtype=np.float32)
    bias = rng.standard_normal(D_FF, dtype=np.float32)
    path = tmp_path / "relu.qjitn"
    with qjit.NeuronFileWriter(path, layers=1, d_model=D_MODEL, d_ff=D_FF, activation="relu", has_bias=True,
                               bits=8, group_size=32) as writer:
        writer.add_layer(up, down, bias=bias)
    ffn = qjit.FlashFfn(exact_context, path, dram_budget_bytes=1 << 20, direct_io=False)
    assert ffn.info.format.startswith("q8g32")
    x = rng.standard_normal((4, D_MODEL), dtype=np.float32)
    reference = np.maximum(x.astype(np.float64) @ up + bias, 0) @ down
    error = np.abs(ffn(0, x) - reference).max() / np.abs(reference).max()
    assert error < 0.02  # 8-bit codes in groups of 32: well under 1 % of the output's range


def test_bad_input_is_refused_by_name(exact_context, swiglu_file, tmp_path, rng):
    path, (layer0, _) = swiglu_file
    up, gate, down = layer0
    ffn = qjit.FlashFfn(exact_context, path, direct_io=False)
    with pytest.raises(qjit.InvalidArgumentError, match="d_model"):
        ffn(0, np.zeros((1, D_MODEL + 1), dtype=np.float32))
    with pytest.raises(qjit.InvalidArgumentError):
        ffn(5, np.zeros((1, D_MODEL), dtype=np.float32))
    with pytest.raises(qjit.InvalidArgumentError):
        ffn(0, np.zeros((1, D_MODEL), dtype=np.float32), active=[D_FF])
    writer = qjit.NeuronFileWriter(tmp_path / "bad.qjitn", layers=1, d_model=D_MODEL, d_ff=D_FF, activation="swiglu")
    with pytest.raises(qjit.InvalidArgumentError, match="gate"):
        writer.add_layer(up, down)
    with pytest.raises(qjit.InvalidArgumentError, match="up"):
        writer.add_layer(up.T.copy(), down, gate=gate)


def test_an_unfinished_writer_leaves_the_old_file(exact_context, swiglu_file):
    path, _ = swiglu_file
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with qjit.NeuronFileWriter(path, layers=2, d_model=D_MODEL, d_ff=D_FF, activation="swiglu", f16=True):
            raise RuntimeError("stopped before any layer")
    assert path.read_bytes() == before


def test_a_truncated_file_is_corrupt(exact_context, swiglu_file, tmp_path):
    path, _ = swiglu_file
    truncated = tmp_path / "truncated.qjitn"
    truncated.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(qjit.CorruptDataError):
        qjit.FlashFfn(exact_context, truncated, direct_io=False)
