"""Flash FFNs: a model's FFN layers kept in a neuron file and read neuron by neuron (docs/flash.md).

    import qjit
    with qjit.NeuronFileWriter("ffn.qjitn", layers=2, d_model=64, d_ff=256, activation="swiglu") as w:
        for up, gate, down in weights:           # (d_model, d_ff), (d_model, d_ff), (d_ff, d_model)
            w.add_layer(up, down, gate=gate)
    ffn = qjit.FlashFfn(qjit.Context(), "ffn.qjitn", dram_budget_bytes=1 << 20)
    y = ffn(0, x)                                 # layer 0 on x (..., d_model), every neuron

A SwiGLU file written with ``sparsity=S`` (and each layer's FFN inputs on calibration tokens,
``add_layer(up, down, gate=gate, calibration=x_cal)``) holds a threshold per layer that zeroes a
share S of the calibration's (token, neuron) pairs; served with its gates resident, a token reads
only the up and down vectors of the neurons above it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import numpy as np

from . import _native
from .context import choice
from .linear import quant_config

ACTIVATIONS = {"relu": 0, "swiglu": 1}
SPARSITY_SCORES = {"gate": 0, "weighted": 1}  # qjit_flash_sparsity_score


class NeuronFileWriter:
    """Writes a neuron file layer by layer; ``finish`` (or leaving a ``with`` block without an
    exception) renames the complete file over ``path``, so an existing file is only ever replaced
    by a whole one.

    Args:
        layers, d_model, d_ff: the FFN stack's shape.
        activation: "swiglu" (gate, up, down) or "relu" (up with an optional bias, down).
        has_bias: ReLU only: a bias per neuron.
        bits, group_size, symmetric, scale_dtype: each neuron vector's RTN format (4-bit g128 by default).
        f16: store vectors as fp16 instead (the format options are then ignored).
        bundled: one record per neuron (all its vectors), read in one request; False: one per part.
        alignment: record alignment in bytes, a power of two >= 512.
        sparsity: SwiGLU only, training-free sparsity: 0 (none) or the share in (0, 1) of
            (token, neuron) pairs each layer's threshold zeroes on its calibration rows; every
            ``add_layer`` then takes ``calibration``, and a bundled file keeps the gates in records
            of their own (resident when served).
        sparsity_score: what the threshold is set on: "gate", |silu(x . gate_i)| (CATS), or
            "weighted" (the default), that times rms(x . up_i) over the calibration times |down_i|
            (docs/flash.md).
    """

    def __init__(self, path: str | os.PathLike, layers: int, d_model: int, d_ff: int, activation: str = "swiglu",
                 has_bias: bool = False, bits: int = 4, group_size: int = 128, symmetric: bool = False,
                 scale_dtype: str = "f16", f16: bool = False, bundled: bool = True, alignment: int = 4096,
                 sparsity: float = 0.0, sparsity_score: str = "weighted") -> None:
        quant = quant_config("NeuronFileWriter", bits, group_size, symmetric, "rtn", scale_dtype, {})
        self._native = _native.FlashWriter(os.fspath(path), int(layers), int(d_model), int(d_ff),
                                           choice(ACTIVATIONS, activation, "activation"), bool(has_bias), bool(f16),
                                           quant, bool(bundled), int(alignment), float(sparsity),
                                           choice(SPARSITY_SCORES, sparsity_score, "sparsity_score"))

    def add_layer(self, up: Any, down: Any, gate: Any = None, bias: Any = None, calibration: Any = None) -> None:
        """The next layer: up and gate (d_model, d_ff), down (d_ff, d_model), bias (d_ff,), float32.

        calibration: for a file with sparsity (required there, refused elsewhere), float32 rows
        (n, d_model) of this layer's FFN input on calibration tokens; the layer's threshold is set
        so that ``sparsity`` of the (row, neuron) pairs fall below it, on the file's own (quantized)
        weights.
        """
        self._native.add_layer(up, gate, down, bias, calibration)

    def finish(self) -> None:
        self._native.finish()

    def __enter__(self) -> "NeuronFileWriter":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is None:
            self.finish()
        # On an exception the writer is dropped unfinished: nothing is written.


@dataclasses.dataclass(frozen=True)
class FlashFfnInfo:
    """A flash FFN's file and memory (qjit_flash_ffn_info)."""

    layers: int
    d_model: int
    d_ff: int
    activation: str  #: "relu" or "swiglu"
    bundled: bool
    record_bytes: int  #: bytes read for one neuron (bundled) or one neuron's part
    resident_neurons: int  #: a layer's resident cache capacity
    dram_bytes: int  #: held now: resident gates, caches, read staging, predictors
    gate_apart: bool  #: the gates in records of their own (a file written with sparsity)
    sparsity: float  #: the file's calibrated target when in use (gates resident), else 0
    resident_gate_bytes: int  #: the resident gates' share of dram_bytes
    weight_bytes: int  #: every layer's vectors (and biases)
    all_resident_bytes: int  #: the dram_budget_bytes that keeps every neuron resident (gates included)
    format: str  #: the vectors' format ("q4g128_asym", "f16")
    storage: str  #: how the file is read
    kernels: str  #: the generated sparse kernels with their tuned tilings; "" where hand-written ones run


@dataclasses.dataclass(frozen=True)
class FlashCounters:
    """What the forwards did since the last reset (qjit_flash_counters)."""

    tokens: int
    active_neurons: int
    cache_hits: int
    neurons_loaded: int
    predicted: int
    bytes_read: int
    reads: int
    io_seconds: float
    io_wait_seconds: float
    cache_seconds: float
    compute_seconds: float
    predict_seconds: float
    read_ahead_neurons: int  #: neurons read ahead of their layer (their bytes are in bytes_read)
    read_ahead_used: int  #: ... of which their layer needed (active and not resident)


class FlashFfn:
    """A neuron file's FFN layers, computed over the active neurons and read from storage on demand.

    Args:
        context: a :class:`qjit.Context` (its thread pool computes).
        path: the neuron file.
        dram_budget_bytes: memory for resident neurons, all layers together (0: none resident).
        window: tokens a neuron stays resident after it was last active (0: only pinned ones).
        direct_io: read with O_DIRECT (the device, not the page cache); False where the file
            system refuses it (tmpfs).
        coalesce_reads: read neighbouring records together.
        tune_reads: measure the device's read curve when the tuning database has none.
        use_sparsity: for a file written with sparsity: keep every gate resident (read now, out of
            ``dram_budget_bytes``; a budget below them is refused) and run, per row and layer, only
            the neurons whose score passes the layer's threshold, reading their up and down alone.
            False: serve it as a file without thresholds (every neuron).
        read_ahead: once a layer's reads are in, read the next layer's neurons that its criterion
            (thresholds, predictor, else all) names for this layer's input, while this layer
            computes and the caller runs what lies between the two FFNs; call the layers in order.
    """

    def __init__(self, context: Any, path: str | os.PathLike, dram_budget_bytes: int = 0, window: int = 4,
                 direct_io: bool = True, coalesce_reads: bool = True, tune_reads: bool = False,
                 use_sparsity: bool = True, read_ahead: bool = False) -> None:
        self.context = context
        self._native = _native.FlashFfn(context._native, os.fspath(path), int(dram_budget_bytes), int(window),
                                        bool(direct_io), bool(coalesce_reads), bool(tune_reads), bool(use_sparsity),
                                        bool(read_ahead))

    @property
    def info(self) -> FlashFfnInfo:
        record = self._native.info()
        names = {value: name for name, value in ACTIVATIONS.items()}
        return FlashFfnInfo(**{**record, "activation": names[record["activation"]]})

    def pin(self, layer: int, neurons: Any) -> None:
        """Keeps a layer's neurons (int32 ids) resident for good, reading them now."""
        self._native.pin(int(layer), np.ascontiguousarray(neurons, dtype=np.int32))

    def fit_predictor(self, layer: int, x: Any, target_recall: float = 0.99, magnitude_threshold: float = 0.0) -> None:
        """Fits the layer's low-rank predictor of its active neurons on calibration inputs x (n, d_model).

        SwiGLU neurons count as active where |silu(x . gate) * (x . up)| > magnitude_threshold.
        """
        self._native.fit_predictor(int(layer), x, float(target_recall), float(magnitude_threshold))

    def forward(self, layer: int, x: Any, active: Optional[Any] = None) -> Any:
        """The layer's FFN of x (..., d_model), over ``active`` neuron ids (int32) when given (in every
        row, gates unmasked); else, with calibrated sparsity in use, each row's neurons above the
        layer's threshold; else the predictor's neurons where the layer has one; else every neuron.
        Returns x's kind of array."""
        ids = None if active is None else np.ascontiguousarray(active, dtype=np.int32)
        return self._native.forward(int(layer), x, ids)

    __call__ = forward

    def counters(self) -> FlashCounters:
        return FlashCounters(**self._native.counters())

    def reset_counters(self) -> None:
        self._native.reset_counters()
