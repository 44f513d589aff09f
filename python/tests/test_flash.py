"""qjit.NeuronFileWriter and qjit.FlashFfn: neuron files written from numpy weights, FFN forwards
against numpy's on every neuron and on subsets, counters, and bad input; files written with
calibrated sparsity against numpy's masked FFN over each row's neurons above the threshold."""

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


def test_read_ahead_serves_the_next_layer_with_the_same_result(exact_context, swiglu_file, rng):
    """Every neuron of layer 1 is read while layer 0 finishes; layer 1 then reads nothing itself."""
    path, weights = swiglu_file
    ffn = qjit.FlashFfn(exact_context, path, dram_budget_bytes=0, direct_io=False, read_ahead=True)
    x = rng.standard_normal((2, D_MODEL), dtype=np.float32)
    ffn(0, x)
    before = ffn.counters()
    assert before.read_ahead_neurons == D_FF and before.read_ahead_used == 0
    up, gate, down = weights[1]
    np.testing.assert_allclose(ffn(1, x), swiglu_reference(x, up, gate, down), rtol=1e-4, atol=1e-4)
    after = ffn.counters()
    # Layer 1's bytes are the reads ahead's (counted once waited for), the same as layer 0's own.
    assert after.read_ahead_used == D_FF
    assert (after.reads, after.bytes_read) == (2 * before.reads, 2 * before.bytes_read)
    assert after.read_ahead_neurons == D_FF  # the last layer reads nothing ahead


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


# ---- calibrated sparsity (docs/flash.md, "SwiGLU models: calibrated sparsity with the gates resident") ----

SPARSE_ROWS = 12


def two_regime_swiglu(rng, layers):
    """fp16-representable SwiGLU weights and, per layer, rows whose gate scores fall in two regimes
    far apart: a row of kind A (feature 0 set) drives neurons 0..D_FF/2 (gate weight 1.5 on feature
    0) and leaves the others near 0, a row of kind B (feature 1) the reverse. Every row so has half
    its neurons far above any threshold that zeroes half the pairs and half far below, and which
    half depends on the row."""
    def f16(a):
        return a.astype(np.float16).astype(np.float32)
    half = D_FF // 2
    weights, rows = [], []
    for _ in range(layers):
        gate = f16(rng.standard_normal((D_MODEL, D_FF)) * 0.02)
        gate[:2, :] = 0
        gate[0, :half] = 1.5
        gate[1, half:] = 1.5
        up = f16(rng.standard_normal((D_MODEL, D_FF)) * 0.2)
        down = f16(rng.standard_normal((D_FF, D_MODEL)) * 0.2)
        x = (rng.standard_normal((SPARSE_ROWS, D_MODEL)) * 0.5).astype(np.float32)
        x[:, :2] = 0
        x[0::2, 0] = 2.0  # kind A
        x[1::2, 1] = 2.0  # kind B
        weights.append((up, gate, down))
        rows.append(x)
    return weights, rows


def calibrated_mask(x, up, gate, down, sparsity, score):
    """Which (row, neuron) pairs pass the threshold calibrated on rows x, as runtime/flash/ffn_sparsity.cpp
    sets it: the score |silu(x . gate_i)| * c_i, c_i = 1 ("gate") or rms(x . up_i) * |down_i| scaled to a
    mean of 1 ("weighted"); the threshold is the zeroed-th smallest score (zeroed = floor(sparsity * pairs)),
    and a pair passes when its score is above it. Asserts a wide gap around the threshold, so that fp32
    rounding in the library cannot move a pair across it."""
    x64 = x.astype(np.float64)
    c = np.ones(D_FF)
    if score == "weighted":
        c = np.sqrt(np.mean((x64 @ up) ** 2, axis=0)) * np.linalg.norm(down.astype(np.float64), axis=1)
        c = c * D_FF / c.sum()
    scores = np.abs(silu(x64 @ gate)) * c
    ordered = np.sort(scores, axis=None)
    zeroed = int(sparsity * scores.size)
    threshold, next_up = ordered[zeroed - 1], ordered[zeroed]
    assert next_up > 3 * threshold, f"scores {threshold} and {next_up} too close around the threshold"
    return scores > threshold


def masked_reference(x, up, gate, down, mask):
    """The SwiGLU FFN in float64 with each row's neurons outside `mask` (rows x d_ff) left out."""
    x = x.astype(np.float64)
    return (silu(x @ gate) * (x @ up) * mask) @ down


@pytest.fixture(params=["gate", "weighted"])
def sparse_file(request, tmp_path, rng):
    weights, rows = two_regime_swiglu(rng, 2)
    path = tmp_path / f"sparse-{request.param}.qjitn"
    with qjit.NeuronFileWriter(path, layers=2, d_model=D_MODEL, d_ff=D_FF, activation="swiglu", f16=True,
                               sparsity=0.5, sparsity_score=request.param) as writer:
        for (up, gate, down), x in zip(weights, rows):
            writer.add_layer(up, down, gate=gate, calibration=x)
    return path, weights, rows, request.param


def test_sparse_file_info(exact_context, sparse_file):
    path, _, _, _ = sparse_file
    ffn = qjit.FlashFfn(exact_context, path, dram_budget_bytes=1 << 22, direct_io=False)
    info = ffn.info
    assert info.gate_apart and info.bundled and info.activation == "swiglu"
    assert info.sparsity == pytest.approx(0.5)
    assert info.resident_gate_bytes >= 2 * D_FF * D_MODEL * 2  # every layer's fp16 gates
    assert info.dram_bytes >= info.resident_gate_bytes
    assert info.weight_bytes == 2 * D_FF * 3 * D_MODEL * 2  # 2 layers of d_ff neurons, 3 fp16 vectors each
    assert info.all_resident_bytes > info.resident_gate_bytes


def test_sparse_forward_masks_each_row_on_its_own(exact_context, sparse_file):
    path, weights, rows, score = sparse_file
    ffn = qjit.FlashFfn(exact_context, path, dram_budget_bytes=1 << 22, direct_io=False)
    for layer, ((up, gate, down), x) in enumerate(zip(weights, rows)):
        mask = calibrated_mask(x, up, gate, down, 0.5, score)
        assert mask.sum() == mask.size // 2 and 0 < mask.sum(axis=1).min()
        expected = masked_reference(x, up, gate, down, mask)
        # A batch of rows of both kinds: the union of their neurons, each row masked on its own.
        np.testing.assert_allclose(ffn(layer, x), expected, rtol=1e-4, atol=1e-4)
        ffn.reset_counters()
        for r in range(SPARSE_ROWS):
            np.testing.assert_allclose(ffn(layer, x[r:r + 1]), expected[r:r + 1], rtol=1e-4, atol=1e-4)
        counters = ffn.counters()
        assert counters.tokens == SPARSE_ROWS
        assert counters.active_neurons == mask.sum() < SPARSE_ROWS * D_FF
        # The sparse result is not the dense one: the masked neurons did contribute something.
        assert np.abs(expected - swiglu_reference(x, up, gate, down)).max() > 1e-3


def test_sparse_file_served_without_sparsity_is_dense(exact_context, sparse_file):
    path, weights, rows, _ = sparse_file
    ffn = qjit.FlashFfn(exact_context, path, direct_io=False, use_sparsity=False)
    info = ffn.info
    assert info.gate_apart and info.sparsity == 0 and info.resident_gate_bytes == 0
    for layer, ((up, gate, down), x) in enumerate(zip(weights, rows)):
        ffn.reset_counters()
        np.testing.assert_allclose(ffn(layer, x[:1]), swiglu_reference(x[:1], up, gate, down), rtol=1e-4, atol=1e-4)
        assert ffn.counters().active_neurons == D_FF


def test_sparsity_refuses_a_budget_below_the_gates(exact_context, sparse_file):
    path, _, _, _ = sparse_file
    with pytest.raises(qjit.InvalidArgumentError, match="resident gates"):
        qjit.FlashFfn(exact_context, path, dram_budget_bytes=1000, direct_io=False)


def test_sparsity_arguments_are_checked(tmp_path, rng):
    (up, gate, down), = random_swiglu(rng, 1)
    x = rng.standard_normal((8, D_MODEL), dtype=np.float32)
    path = tmp_path / "bad-sparse.qjitn"
    with pytest.raises(qjit.InvalidArgumentError, match="sparsity_score"):
        qjit.NeuronFileWriter(path, layers=1, d_model=D_MODEL, d_ff=D_FF, sparsity=0.5, sparsity_score="cats")
    with pytest.raises(qjit.InvalidArgumentError, match="sparsity"):
        qjit.NeuronFileWriter(path, layers=1, d_model=D_MODEL, d_ff=D_FF, activation="relu", sparsity=0.5)
    with pytest.raises(qjit.InvalidArgumentError, match="sparsity"):
        qjit.NeuronFileWriter(path, layers=1, d_model=D_MODEL, d_ff=D_FF, sparsity=1.0)
    writer = qjit.NeuronFileWriter(path, layers=1, d_model=D_MODEL, d_ff=D_FF, sparsity=0.5, sparsity_score="gate")
    with pytest.raises(qjit.InvalidArgumentError, match="calibration"):
        writer.add_layer(up, down, gate=gate)
    with pytest.raises(qjit.InvalidArgumentError, match="calibration"):
        writer.add_layer(up, down, gate=gate, calibration=x[:, :-1])
    with pytest.raises(qjit.InvalidArgumentError, match="calibration"):
        writer.add_layer(up, down, gate=gate, calibration=x[:0])
    with pytest.raises(qjit.InvalidArgumentError, match="calibration"):
        writer.add_layer(up, down, gate=gate, calibration=x[0])
    dense = qjit.NeuronFileWriter(tmp_path / "dense.qjitn", layers=1, d_model=D_MODEL, d_ff=D_FF)
    with pytest.raises(qjit.InvalidArgumentError, match="calibration"):
        dense.add_layer(up, down, gate=gate, calibration=x)
