"""qjit.torch: qjit layers as PyTorch modules, under torch.compile too, and whole models quantized,
saved and loaded, or loaded from GPTQ checkpoints.

    import qjit, qjit.torch
    from torch import nn
    ctx = qjit.Context()
    layer = qjit.torch.QuantLinear.from_linear(ctx, nn.Linear(4096, 4096), bits=4, group_size=128)
    qjit.torch.quantize_model(model, bits=4, group_size=128)       # every nn.Linear but the classifier
    model = qjit.torch.from_gptq_model(model, "path/to/gptq-checkpoint")
    compiled = torch.compile(model)                                # qjit's forward is an operator

Importing this package imports PyTorch; ``import qjit`` alone never does.
"""

from .models import load_quantized, quantize_model, save_quantized
from .modules import QuantLinear, from_gptq_model

__all__ = ["QuantLinear", "from_gptq_model", "load_quantized", "quantize_model", "save_quantized"]
