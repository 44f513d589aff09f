"""Flash FFNs: a model's FFN layers kept in a neuron file and read neuron by neuron (docs/flash.md).

    import qjit
    with qjit.NeuronFileWriter("ffn.qjitn", layers=2, d_model=64, d_ff=256, activation="swiglu") as w:
        for up, gate, down in weights:           # (d_model, d_ff), (d_model, d_ff), (d_ff, d_model)
            w.add_layer(up, down, gate=gate)
    ffn = qjit.FlashFfn(qjit.Context(), "ffn.qjitn", dram_budget_bytes=1 << 20)
    y = ffn(0, x)                                 # layer 0 on x (..., d_model), every neuron
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
    """

    def __init__(self, path: str | os.PathLike, layers: int, d_model: int, d_ff: int, activation: str = "swiglu",
                 has_bias: bool = False, bits: int = 4, group_size: int = 128, symmetric: bool = False,
                 scale_dtype: str = "f16", f16: bool = False, bundled: bool = True, alignment: int = 4096) -> None:
        quant = quant_config("NeuronFileWriter", bits, group_size, symmetric, "rtn", scale_dtype, {})
        self._native = _native.FlashWriter(os.fspath(path), int(layers), int(d_model), int(d_ff),
                                           choice(ACTIVATIONS, activation, "activation"), bool(has_bias), bool(f16),
                                           quant, bool(bundled), int(alignment))

    def add_layer(self, up: Any, down: Any, gate: Any = None, bias: Any = None) -> None:
        """The next layer: up and gate (d_model, d_ff), down (d_ff, d_model), bias (d_ff,), float32."""
        self._native.add_layer(up, gate, down, bias)

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
    dram_bytes: int  #: held now: caches, read staging, predictors
    format: str  #: the vectors' format ("q4g128_asym", "f16")
    storage: str  #: how the file is read


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
    """

    def __init__(self, context: Any, path: str | os.PathLike, dram_budget_bytes: int = 0, window: int = 4,
                 direct_io: bool = True, coalesce_reads: bool = True, tune_reads: bool = False) -> None:
        self.context = context
        self._native = _native.FlashFfn(context._native, os.fspath(path), int(dram_budget_bytes), int(window),
                                        bool(direct_io), bool(coalesce_reads), bool(tune_reads))

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
        """The layer's FFN of x (..., d_model), over ``active`` neuron ids (int32) when given, else the
        predictor's neurons where the layer has one, else every neuron. Returns x's kind of array."""
        ids = None if active is None else np.ascontiguousarray(active, dtype=np.int32)
        return self._native.forward(int(layer), x, ids)

    __call__ = forward

    def counters(self) -> FlashCounters:
        return FlashCounters(**self._native.counters())

    def reset_counters(self) -> None:
        self._native.reset_counters()
