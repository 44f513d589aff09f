"""qjit.Linear: a quantized linear layer, y = x W, on numpy arrays and PyTorch tensors."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Tuple

import numpy as np

from . import _native
from .context import choice
from .errors import InvalidArgumentError

METHODS = {"rtn": 0, "hqq": 1, "milo": 2, "gptq": 3, "mixed": 4}
LAYOUTS = {"k_by_n": 0, "n_by_k": 1}
SCALE_DTYPES = {"f32": 0, "f16": 1}
CHECKPOINT_FORMATS = {"gptq": 1, "gptq_v2": 2}
# The ggml tensor types Linear.from_gguf imports, by the numbers GGUF files store (qjit_ggml_type).
GGML_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13,
              "Q6_K": 14, "IQ4_NL": 20, "IQ4_XS": 23}
TILING_SOURCES = ("portable", "forced", "database", "context", "searched", "model", "pack")
CUDA_DTYPES = {"f16": 1, "bf16": 2}

# The options of Linear.quantize beyond bits, group size and symmetry (qjit_quant_config's fields).
METHOD_OPTIONS = ("rank", "low_rank_bits", "act_order", "damp", "mixed_alpha", "outlier_fraction",
                  "second_order_scales", "float_offsets", "milo_base",
                  "mixed_bits_per_weight")


def quant_config(caller: str, bits: int, group_size: int, symmetric: bool, method: str, scale_dtype: str,
                 options: dict) -> dict:
    """qjit_quant_config's fields as the native calls take them; an option that is not a method
    option raises TypeError naming ``caller``."""
    unknown = sorted(set(options) - set(METHOD_OPTIONS))
    if unknown:
        raise TypeError(f"{caller}() got unknown option(s) {', '.join(unknown)}; "
                        f"the method options are {', '.join(METHOD_OPTIONS)}")
    if "milo_base" in options:
        options = dict(options, milo_base=choice(METHODS, options["milo_base"], "milo_base"))
    config = _native.default_quant_config()
    config.update(bits=bits, group_size=group_size, symmetric=bool(symmetric),
                  method=choice(METHODS, method, "method"),
                  scale_dtype=choice(SCALE_DTYPES, scale_dtype, "scale_dtype"), **options)
    return config


@dataclasses.dataclass(frozen=True)
class LinearInfo:
    """What a layer is: its shape, format and storage (qjit_linear_info)."""

    k: int  #: input features
    n: int  #: output features
    bits: int
    group_size: int  #: rows per group; K when there is one group per column
    symmetric: bool
    act_order: bool  #: rows stored permuted, activations gathered at run time
    weight_bytes: int  #: the bytes one forward streams
    low_rank: int  #: the compensator's rank; 0 without one
    low_rank_bits: int
    stored_bytes: int  #: what the format stores
    low_rank_bytes: int  #: the compensator's part of stored_bytes
    wide_groups: int  #: mixed 2/4-bit layers: groups stored in 4 bits
    second_order_scales: bool
    outliers: int  #: sparse fp16 outliers
    float_offsets: bool  #: real-valued offsets per group instead of integer zero points
    scale_code_bits: int  #: super-block scales (GGUF K-quants): bits of each group's scale code; 0 otherwise

    @property
    def bits_per_weight(self) -> float:
        return self.stored_bytes * 8 / (self.k * self.n)


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How a layer's kernel tiling was chosen (qjit_linear_tuning)."""

    source: str  #: portable, forced, database, context, searched or model
    kernel_key: str  #: the tuning database key; "" on the portable path
    tiling: str
    tuning_ms: float
    kernel_ms: float
    measured_us: float
    candidates_timed: int
    candidates_ranked: int
    warning: str  #: a problem with the tuning database, or ""


def tuning_from(record: dict) -> Tuning:
    return Tuning(**{**record, "source": TILING_SOURCES[record["source"]]})


class Calibration:
    """What GPTQ and the mixed 2/4-bit format learn from a layer's inputs: H = sum of x^T x.

    Add batches of the layer's real inputs with :meth:`add` (any leading shape, last dimension K),
    or give H or its diagonal outright.
    """

    def __init__(self, k: int) -> None:
        self._native = _native.Calibration(int(k))

    def add(self, x: Any) -> "Calibration":
        """Adds rows of inputs (float32, shape (..., K)). Returns self."""
        self._native.add(x)
        return self

    def set_hessian(self, h: Any) -> None:
        """Replaces what was added by H itself (K x K float32, symmetric)."""
        self._native.set_hessian(h)

    def set_diagonal(self, diagonal: Any) -> None:
        """Replaces what was added by H's diagonal alone (K float32 values >= 0)."""
        self._native.set_diagonal(diagonal)

    @property
    def k(self) -> int:
        return self._native.k

    @property
    def rows(self) -> int:
        """Input rows added so far."""
        return self._native.rows


class Linear:
    """A quantized linear layer: ``layer(x)`` computes y = x W for x of shape (..., K).

    Make one with :meth:`quantize`, :meth:`from_gptq`, :meth:`from_gguf`, :meth:`load` or
    ``Checkpoint.create``.
    W is K x N (inputs by outputs); ``dequantize()`` returns it. Forwards take float32 numpy arrays
    or PyTorch CPU tensors of any leading shape, without copying them (a non-contiguous input is
    copied once), and return the same kind. Several threads may call a layer at once; the GIL is
    released while it computes.
    """

    __slots__ = ("_native", "context")

    def __init__(self, native: Any, context: Any) -> None:
        """Internal: layers come from the class methods."""
        self._native = native
        self.context = context  # kept: the context outlives its layers

    # ---- making layers ----

    @classmethod
    def quantize(cls, context: Any, w: Any, bits: int = 4, group_size: int = 128, symmetric: bool = False,
                 method: str = "rtn", calibration: Any = None, layout: str = "n_by_k", scale_dtype: str = "f16",
                 **options: Any) -> "Linear":
        """Quantizes float32 weights.

        Args:
            w: the weights, (N, K) as PyTorch's ``nn.Linear.weight`` (out x in) by default, or
                (K, N) with ``layout="k_by_n"``.
            bits: 2, 3, 4 or 8 (ignored by "mixed", which picks 2 or 4 per group).
            group_size: rows of K per scale: 16, 32, 64, 128, 256, or -1 for one per column.
            symmetric: zero point fixed at 2^(bits-1).
            method: "rtn", "hqq", "milo", "gptq" (needs ``calibration``) or "mixed".
            calibration: a :class:`Calibration`, or an array of sample inputs (..., K).
            scale_dtype: "f16" (scales rounded to half precision, as stored) or "f32".
            options: the method's options: rank and low_rank_bits (milo), act_order and damp
                (gptq, mixed), mixed_alpha, mixed_bits_per_weight (a budget in place of alpha),
                outlier_fraction and second_order_scales (mixed),
                float_offsets (rtn, hqq, milo: True for a real offset per group, W = s * q + m, rtn
                taking each group's min; False for integer zero points; None, the default: the
                method's measured choice, offsets for hqq only), milo_base ("hqq", "rtn" or "gptq": the quantizer under the compensator).
                hqq weighs each row's error by its inputs' second moment with a calibration (by the
                inverse of its weights' mean square without), and milo
                fits the layer's output error.
        """
        config = quant_config("Linear.quantize", bits, group_size, symmetric, method, scale_dtype, options)
        layout_value = choice(LAYOUTS, layout, "layout")
        if calibration is not None and not isinstance(calibration, Calibration):
            k = _last_dimension(w, layout_value)
            calibration = Calibration(k).add(calibration)
        native = _native.Linear.quantize(context._native, w, layout_value, config,
                                         None if calibration is None else calibration._native)
        return cls(native, context)

    @classmethod
    def from_gptq(cls, context: Any, qweight: Any, qzeros: Any, scales: Any, g_idx: Any = None, *, bits: int = 4,
                  group_size: Optional[int] = None, checkpoint_format: str = "gptq", k: Optional[int] = None,
                  low_rank: Optional[Tuple[Any, Any]] = None, low_rank_bits: int = 8) -> "Linear":
        """Imports a GPTQ layer from its tensors, as AutoGPTQ and GPTQModel store them.

        Args:
            qweight: int32 [ceil(K * bits / 32), N]; qzeros: int32 [groups, ceil(N * bits / 32)];
            scales: float16, bfloat16 or float32 [groups, N]; g_idx: int32 [K] or None.
            group_size: rows per group, -1 per column; None: K / groups, from the shapes.
            checkpoint_format: "gptq" (v1: zero points stored minus one) or "gptq_v2".
            k: input features; needed only for 3-bit layers without a g_idx.
            low_rank: a compensator (U [K, rank], V [rank, N], float32): y = x W + (x U) V.
            low_rank_bits: how qjit stores U and V: 8, 3 or 16.
        """
        n = _shape(qweight, "qweight")[-1]
        if k is None:
            if g_idx is not None:
                k = _shape(g_idx, "g_idx")[0]
            elif bits == 3:
                raise InvalidArgumentError("a 3-bit layer without g_idx needs k (qweight's rows do not determine it)")
            else:
                k = _shape(qweight, "qweight")[0] * 32 // bits
        if group_size is None:
            groups = _shape(scales, "scales")[0]
            group_size = -1 if groups == 1 else -(-k // groups)
        u, v = (None, None) if low_rank is None else low_rank
        native = _native.Linear.from_gptq(context._native, int(k), int(n), int(bits), int(group_size), qweight,
                                          qzeros, scales, g_idx,
                                          choice(CHECKPOINT_FORMATS, checkpoint_format, "checkpoint_format"),
                                          u, v, int(low_rank_bits))
        return cls(native, context)

    @classmethod
    def from_gguf(cls, context: Any, ggml_type: Any, data: Any, k: int, n: int) -> "Linear":
        """Imports a GGUF weight tensor of dims {K, N} (N rows of K values in ggml blocks) exactly:
        ``dequantize()`` gives ggml's fp32 values (``gguf.quants.dequantize``), transposed to K x N.

        Args:
            ggml_type: a type name ("Q4_K"), its number, or a ``gguf.GGMLQuantizationType``: Q4_0,
                Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K (others raise UnsupportedError).
            data: the tensor's bytes: bytes, a buffer, or a uint8 array of any shape (as
                ``GGUFReader`` gives ``tensor.data``); N * (K / block values) * block bytes of them.
            k: input features (GGUF's dims[0]), a multiple of the type's block; n: output features.
        """
        if isinstance(ggml_type, str):
            type_number = choice(GGML_TYPES, ggml_type, "ggml_type")
        else:
            type_number = int(ggml_type)  # a number, or gguf's IntEnum
            if not 0 <= type_number < 2**32:
                raise InvalidArgumentError(f"ggml_type is {type_number}; expected a ggml type number")
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = np.frombuffer(data, dtype=np.uint8)
        native = _native.Linear.from_gguf(context._native, type_number, data, int(k), int(n))
        return cls(native, context)

    @classmethod
    def load(cls, context: Any, path: str | os.PathLike) -> "Linear":
        """Loads a layer saved by :meth:`save` (checked: a corrupt file raises CorruptDataError)."""
        return cls(_native.Linear.load(context._native, os.fspath(path)), context)

    def save(self, path: str | os.PathLike) -> None:
        """Saves the packed layer; an existing file is replaced atomically, or left as it was."""
        self._native.save(os.fspath(path))

    # ---- running ----

    def __call__(self, x: Any, out: Any = None) -> Any:
        return self._native.forward(x, out)

    def forward(self, x: Any, out: Any = None) -> Any:
        """y = x W for float32 x of shape (..., K); y has shape (..., N).

        ``out``: a float32, C-contiguous array of y's shape to write into (no allocation).
        """
        return self._native.forward(x, out)

    def dequantize(self) -> Any:
        """The float32 K x N matrix W the layer represents (y = x @ W), rows in original order."""
        return self._native.dequantize()

    def benchmark(self, m: int = 1, repeats: int = 100, cold: bool = False) -> float:
        """Median microseconds of ``repeats`` C forwards of m rows (cold: caches flushed before each)."""
        return self._native.benchmark(int(m), int(repeats), bool(cold))

    # ---- what it is ----

    @property
    def in_features(self) -> int:
        return self._native.k

    @property
    def out_features(self) -> int:
        return self._native.n

    @property
    def info(self) -> LinearInfo:
        return LinearInfo(**self._native.info())

    @property
    def tuning(self) -> Tuning:
        """How the CPU kernel's tiling was chosen."""
        return tuning_from(self._native.tuning())

    def cuda_tuning(self, m: int = 1, dtype: str = "f16") -> Tuning:
        """How the CUDA kernel's tiling for m rows of ``dtype`` was chosen (a CUDA context only)."""
        return tuning_from(self._native.tuning_cuda(int(m), choice(CUDA_DTYPES, dtype, "dtype")))

    def describe(self) -> str:
        """The layer's format, kernel and tiling."""
        return self._native.describe()

    def __repr__(self) -> str:
        return f"qjit.Linear({self.describe()})"


def _shape(array: Any, name: str) -> tuple:
    shape = getattr(array, "shape", None)
    if shape is None:
        raise InvalidArgumentError(
            f"{name}: expected an array (numpy array or PyTorch tensor), got {type(array).__name__}")
    return tuple(shape)


def _last_dimension(w: Any, layout: int) -> int:
    shape = _shape(w, "w")
    if len(shape) != 2:
        raise InvalidArgumentError(f"w: {len(shape)} dimensions, expected 2")
    return shape[1] if layout == LAYOUTS["n_by_k"] else shape[0]
