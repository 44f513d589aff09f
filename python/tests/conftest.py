"""Shared fixtures: contexts that tune quickly and keep no database, random data, the error bound."""

from __future__ import annotations

import numpy as np
import pytest

import qjit


@pytest.fixture(scope="session")
def exact_context() -> qjit.Context:
    """fp32 activations (results match the oracle to fp32 rounding), no database, untimed tiling."""
    return qjit.Context(activations="f32", tuning_db="", tuning_budget_ms=0)


@pytest.fixture(scope="session")
def default_context() -> qjit.Context:
    """The default activation path (int8 for 2- to 6-bit weights), no database, untimed tiling."""
    return qjit.Context(tuning_db="", tuning_budget_ms=0)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261124)


def forward_bound(x: np.ndarray, w: np.ndarray, int8_activations: bool) -> np.ndarray:
    """An upper bound on |layer(x) - x @ W| elementwise, W being the layer's dequantized K x N matrix.

    fp32 rounding: each output sums K products whose quantized terms s * (q + z) are at most twice
    a group's largest |W| plus its range, so (K + 3) * eps * 8 * sum_k |x_k| * max_k |W[k][n]| bounds
    it (as the C tests' bound, with the codes replaced by what W alone tells). The int8 path quantizes
    each activation group with step max|x| / 127; taking the whole row's max bounds every group's.
    """
    x64 = np.abs(x.astype(np.float64)).reshape(-1, x.shape[-1])
    w64 = np.abs(w.astype(np.float64))
    k = w.shape[0]
    bound = (k + 3) * np.finfo(np.float32).eps * 8 * x64.sum(axis=1, keepdims=True) * w64.max(axis=0)
    if int8_activations:
        bound = bound + (x64.max(axis=1, keepdims=True) / 127 / 2) * w64.sum(axis=0) * (1 + 1e-6)
    return bound.reshape(x.shape[:-1] + (w.shape[1],)) + 1e-30


def assert_forward_matches(layer: qjit.Linear, x: np.ndarray, y: np.ndarray, int8_activations: bool) -> None:
    w = layer.dequantize()
    expected = x.astype(np.float64) @ w.astype(np.float64)
    error = np.abs(np.asarray(y, dtype=np.float64) - expected)
    bound = forward_bound(x, w, int8_activations)
    assert y.shape == expected.shape
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), f"error {error[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"
