"""qjit's forward as PyTorch operators, so that torch.compile traces QuantLinear without a graph break.

``qjit::linear_out(Tensor x, int layer, Tensor(a!) y) -> ()`` writes y = x W of the qjit layer
registered under the number ``layer``; ``qjit::linear_input_grad(Tensor grad_y, int layer)``
returns grad_y W^T. They are registered with ``torch.library.Library`` (Python implementations per
device, a fake implementation for shapes), not with ``torch.library.custom_op``: measured on the
same machine, the dispatcher reaches a Library implementation in half the time
(bench/python_op_overhead.py). The output is an argument rather than a result so that Inductor
allocates it itself (``empty_strided_cpu``) instead of the implementation calling ``torch.empty``,
which costs more than the call of a small layer.

Layers are registered by number because an operator takes tensors and scalars, not Python objects:
the number is a constant in a compiled graph. Eager calls do not go through the dispatcher at all
(:func:`linear` calls the extension directly).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

from ..context import CUDA_DTYPES
from ..linear import Linear

_LAYERS: dict[int, Linear] = {}
_NUMBERS = itertools.count(1)
_CUDA_DTYPE_CODES = {torch.float16: CUDA_DTYPES["f16"], torch.bfloat16: CUDA_DTYPES["bf16"]}


def register(layer: Linear) -> int:
    """The number the operators know ``layer`` by, until :func:`release`."""
    number = next(_NUMBERS)
    _LAYERS[number] = layer
    return number


def release(number: int) -> None:
    _LAYERS.pop(number, None)


def _layer(number: int) -> Linear:
    try:
        return _LAYERS[number]
    except KeyError:
        raise RuntimeError(f"qjit: no layer is registered as {number} (its QuantLinear was deleted)") from None


def _linear_out_cpu(x: torch.Tensor, layer: int, y: torch.Tensor) -> None:
    # The fewest Python steps: this is most of what a layer costs in a compiled graph beyond the C call.
    _layer(layer)._native.forward_pointers(x.data_ptr(), y.data_ptr(), x.numel() // x.shape[-1])


def _linear_out_cuda(x: torch.Tensor, layer: int, y: torch.Tensor) -> None:
    rows = x.numel() // x.shape[-1]
    if rows > 0:
        with torch.cuda.device(x.device):
            _layer(layer)._native.forward_cuda(x.data_ptr(), y.data_ptr(), rows, _CUDA_DTYPE_CODES[x.dtype],
                                               torch.cuda.current_stream().cuda_stream)


def _linear_input_grad(grad_y: torch.Tensor, layer: int) -> torch.Tensor:
    w = torch.from_numpy(np.ascontiguousarray(_layer(layer).dequantize()))  # K x N
    return grad_y @ w.to(device=grad_y.device, dtype=grad_y.dtype).T


def _linear_input_grad_fake(grad_y: torch.Tensor, layer: int) -> torch.Tensor:
    return grad_y.new_empty(grad_y.shape[:-1] + (_layer(layer).in_features,))


_library = torch.library.Library("qjit", "DEF")
_library.define("linear_out(Tensor x, int layer, Tensor(a!) y) -> ()")
_library.define("linear_input_grad(Tensor grad_y, int layer) -> Tensor")
_library.impl("linear_out", _linear_out_cpu, "CPU")
_library.impl("linear_out", _linear_out_cuda, "CUDA")
for _device in ("CPU", "CUDA"):
    _library.impl("linear_input_grad", _linear_input_grad, _device)
torch.library.register_fake("qjit::linear_out", lambda x, layer, y: None, lib=_library)
torch.library.register_fake("qjit::linear_input_grad", _linear_input_grad_fake, lib=_library)


def linear(x: torch.Tensor, layer: int, out_features: int) -> torch.Tensor:
    """y = x W of registered layer ``layer`` (no gradient): through the operator while
    torch.compile traces; eagerly, CPU tensors go straight to the extension, which makes the output
    tensor itself (the cheapest call), and CUDA tensors to the operator's implementation."""
    if torch.compiler.is_compiling() or x.is_cuda:
        x = x.contiguous()
        y = x.new_empty(x.shape[:-1] + (out_features,))
        if torch.compiler.is_compiling():
            torch.ops.qjit.linear_out(x, layer, y)
        else:
            _linear_out_cuda(x, layer, y)
        return y
    return _layer(layer)._native.forward(x.detach() if x.requires_grad else x, None)


class LinearFunction(torch.autograd.Function):
    """y = x W with the gradient flowing to x (the quantized weights are frozen)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layer: int, out_features: int) -> torch.Tensor:
        ctx.layer = layer
        return linear(x, layer, out_features)

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple:
        grad_y = grad_y.contiguous()
        if torch.compiler.is_compiling():
            return torch.ops.qjit.linear_input_grad(grad_y, ctx.layer), None, None
        return _linear_input_grad(grad_y, ctx.layer), None, None
