"""QuantLinear, qjit's layer as a PyTorch module, and GPTQ checkpoints loaded into PyTorch models."""

from __future__ import annotations

import os
import weakref
from typing import Any, Optional

import torch
from torch import nn

from ..checkpoint import Checkpoint
from ..context import Context
from ..errors import InvalidArgumentError
from ..linear import Linear
from . import ops

_CUDA_DTYPES = (torch.float16, torch.bfloat16)


class QuantLinear(nn.Module):
    """A drop-in for ``nn.Linear`` whose weights are a qjit layer: y = x W + bias.

    Takes float32 CPU tensors of shape (..., in_features); where the layer's context was made
    with ``cuda_device``, also float16 or bfloat16 CUDA tensors on that device. Gradients flow
    to the input; the quantized weights are frozen, and the bias is a buffer, not a parameter.

    Args:
        layer: the qjit layer (``qjit.Linear``).
        bias: out_features values, or None.
    """

    def __init__(self, layer: Linear, bias: Optional[torch.Tensor] = None) -> None:
        super().__init__()
        if not isinstance(layer, Linear):
            raise TypeError(f"QuantLinear wraps a qjit.Linear, got {type(layer).__name__}")
        self.layer = layer
        # Plain attributes, read by forward: torch.compile traces Python, not the extension's properties.
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self._cuda_device = layer.context.cuda_device
        self._number = ops.register(layer)  # what the operators know the layer by (a graph constant)
        weakref.finalize(self, ops.release, self._number)
        if bias is not None:
            bias = bias.detach().to(torch.float32).reshape(-1).clone()
            if bias.numel() != layer.out_features:
                raise InvalidArgumentError(f"bias has {bias.numel()} values; the layer has "
                                           f"{layer.out_features} outputs")
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, context: Context, linear: nn.Linear, **quantize_options: Any) -> "QuantLinear":
        """Quantizes ``linear.weight`` with ``qjit.Linear.quantize(context, w, **quantize_options)``
        and keeps ``linear.bias``."""
        weight = linear.weight.detach().to(device="cpu", dtype=torch.float32).contiguous()
        return cls(Linear.quantize(context, weight, **quantize_options), linear.bias)

    @classmethod
    def from_gptq(cls, context: Context, qweight: Any, qzeros: Any, scales: Any, g_idx: Any = None,
                  bias: Optional[torch.Tensor] = None, **options: Any) -> "QuantLinear":
        """A GPTQ layer from its tensors, as ``qjit.Linear.from_gptq`` takes them, plus a bias."""
        return cls(Linear.from_gptq(context, qweight, qzeros, scales, g_idx, **options), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = x W + bias for x of shape (..., in_features); y has shape (..., out_features)."""
        self._check_input(x)
        if x.requires_grad and torch.is_grad_enabled():
            y = ops.LinearFunction.apply(x, self._number, self.out_features)
        else:
            y = ops.linear(x, self._number, self.out_features)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def _check_input(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"QuantLinear takes a torch.Tensor, got {type(x).__name__}")
        if x.is_cuda and x.device.index == self._cuda_device:
            if x.dtype not in _CUDA_DTYPES:
                raise InvalidArgumentError(f"x: dtype {x.dtype} on CUDA; qjit's CUDA layers take float16 or bfloat16")
        elif x.device.type != "cpu":
            raise InvalidArgumentError(f"x is on {x.device}; this layer runs on CPU tensors, and on CUDA "
                                       "tensors of the device its qjit.Context names with cuda_device")
        elif x.dtype != torch.float32:
            raise InvalidArgumentError(f"x: dtype {x.dtype}; qjit layers take float32 CPU tensors")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise InvalidArgumentError(f"x: shape {tuple(x.shape)}; the last dimension must be "
                                       f"in_features = {self.in_features}")

    def extra_repr(self) -> str:
        info = self.layer.info
        group = "per column" if info.group_size in (-1, info.k) else f"group {info.group_size}"
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"{info.bits}-bit {group}{'' if info.symmetric else ' asymmetric'}")


def from_gptq_model(model: nn.Module, checkpoint_dir: str | os.PathLike,
                    context: Optional[Context] = None) -> nn.Module:
    """Replaces the ``nn.Linear`` submodules of ``model`` that a GPTQ checkpoint quantizes.

    Every ``nn.Linear`` whose qualified name (e.g. "model.layers.0.self_attn.q_proj") is a layer
    of the checkpoint at ``checkpoint_dir`` becomes a :class:`QuantLinear` made from it, keeping
    the module's bias. Raises InvalidArgumentError where a layer's shape disagrees with its
    module's, or where no module matches. Returns ``model``, modified in place.

    Args:
        context: the qjit.Context the layers run on; None for ``qjit.Context()``.
    """
    context = Context() if context is None else context
    with Checkpoint(context, checkpoint_dir) as checkpoint:
        targets = [(name, module) for name, module in model.named_modules()
                   if isinstance(module, nn.Linear) and name in checkpoint]
        if not targets:
            raise InvalidArgumentError(f"no nn.Linear of the model is named like a layer of {checkpoint.path} "
                                       f"(such as {next(iter(checkpoint), None)!r})")
        for name, module in targets:
            layer = checkpoint[name]
            if (layer.k, layer.n) != (module.in_features, module.out_features):
                raise InvalidArgumentError(f"{name}: the checkpoint's layer is {layer.k} -> {layer.n} features, "
                                           f"the model's {module.in_features} -> {module.out_features}")
        for name, module in targets:
            parent_name, _, child_name = name.rpartition(".")
            parent = model.get_submodule(parent_name)
            setattr(parent, child_name, QuantLinear(checkpoint.create(name), module.bias))
    return model
