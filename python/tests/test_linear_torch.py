"""qjit.Linear on PyTorch CPU tensors (shared through DLPack): results come back as tensors."""

from __future__ import annotations

import numpy as np
import pytest

import qjit
from conftest import assert_forward_matches

torch = pytest.importorskip("torch")


@pytest.fixture
def layer(exact_context, rng):
    return qjit.Linear.quantize(exact_context, rng.standard_normal((72, 200), dtype=np.float32), group_size=64)


@pytest.mark.parametrize("batch", [(1,), (3, 5)])
def test_tensors_in_tensors_out(layer, batch):
    x = torch.randn(batch + (200,), generator=torch.Generator().manual_seed(1))
    y = layer(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == batch + (72,)
    assert_forward_matches(layer, x.numpy(), y.numpy(), int8_activations=False)


def test_a_strided_tensor_is_copied_once(layer):
    x = torch.randn(200, 6).t()
    assert not x.is_contiguous()
    torch.testing.assert_close(layer(x), layer(x.contiguous()), rtol=0, atol=0)


def test_out_tensor_is_written_in_place(layer):
    x = torch.randn(4, 200)
    out = torch.empty(4, 72)
    assert layer.forward(x, out=out) is out
    torch.testing.assert_close(out, layer(x), rtol=0, atol=0)


def test_tensors_qjit_cannot_take_are_refused_by_name(layer):
    with pytest.raises(qjit.InvalidArgumentError, match="x: dtype bfloat16, expected float32"):
        layer(torch.randn(2, 200).to(torch.bfloat16))


def test_a_layer_records_no_gradient(layer):
    # qjit.Linear is a plain function of arrays; qjit.torch.QuantLinear is the autograd-aware module.
    y = layer(torch.randn(2, 200, requires_grad=True))
    assert not y.requires_grad and y.grad_fn is None
