"""qjit: run-time generated kernels for LLM linear layers with few-bit quantized weights.

    import numpy as np, qjit
    ctx = qjit.Context()
    layer = qjit.Linear.quantize(ctx, w, bits=4, group_size=128)   # w: (N, K) like nn.Linear.weight
    y = layer(x)                                                   # x: (..., K) float32

See docs/python.md. The C API (qjit.h) is underneath; errors raise qjit.Error subclasses.
"""

from . import _native
from .checkpoint import Checkpoint, CheckpointLayer
from .context import Context
from .errors import (CommunicationError, CorruptDataError, Error, FileIOError, InternalError, InvalidArgumentError,
                     NoDeviceError, OutOfMemoryError, StaleError, UnsupportedError)
from .flash import FlashCounters, FlashFfn, FlashFfnInfo, NeuronFileWriter
from .linear import Calibration, Linear, LinearInfo, Tuning
from .model import Model, ModelInfo, Score
from .tp import TpMlp, TpMlpInfo, moe_forward
from .tune import TuneResult, TuneRow, tune

__version__ = _native.version()


def cuda_device_count() -> int:
    """CUDA devices the driver sees; raises NoDeviceError (with the reason) where there are none."""
    return _native.cuda_device_count()


def cuda_device_info(ordinal: int = 0) -> dict:
    """A CUDA device as the driver reports it (name, compute capability, memory, bandwidth)."""
    return _native.cuda_device_info(ordinal)


__all__ = [
    "Calibration", "Checkpoint", "CheckpointLayer", "CommunicationError", "Context", "CorruptDataError", "Error",
    "FileIOError", "FlashCounters", "FlashFfn", "FlashFfnInfo", "InternalError", "InvalidArgumentError", "Linear",
    "LinearInfo", "Model", "ModelInfo", "NeuronFileWriter", "NoDeviceError", "OutOfMemoryError", "Score", "StaleError", "TpMlp", "TpMlpInfo",
    "TuneResult", "TuneRow", "Tuning", "UnsupportedError", "cuda_device_count", "cuda_device_info", "moe_forward",
    "tune",
]
