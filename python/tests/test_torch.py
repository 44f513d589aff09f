"""qjit.torch: QuantLinear against x W + bias, its gradient, and a Hugging Face Llama (stories260K's
weights) whose linears are replaced from a GPTQ checkpoint directory."""

import copy
import subprocess
import sys

import numpy as np
import pytest

import qjit

torch = pytest.importorskip("torch")
nn = torch.nn
qtorch = pytest.importorskip("qjit.torch")

from gptq_writer import pack, round_to_nearest, write_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def context():
    return qjit.Context(activations="f32", tuning_db="", tuning_budget_ms=0)


def assert_close_to_product(actual, x, w_kn, bias=None):
    """actual == x @ w_kn (+ bias) within 1e-4 of |x| @ |w_kn|, computed in float64."""
    x64, w64 = x.detach().double(), torch.as_tensor(w_kn).double()
    expected = x64 @ w64 + (0 if bias is None else bias.detach().double())
    bound = 1e-4 * (x64.abs() @ w64.abs()) + 1e-6
    assert actual.shape == expected.shape
    excess = ((actual.double() - expected).abs() - bound).max().item()
    assert excess <= 0, f"the error exceeds its bound by {excess:.3g}"


@pytest.mark.parametrize("batch", [(1,), (3, 5)])
def test_forward_is_x_times_dequantized_weights_plus_bias(context, batch):
    torch.manual_seed(0)
    linear = nn.Linear(200, 72)
    module = qtorch.QuantLinear.from_linear(context, linear, bits=4, group_size=-1)
    x = torch.randn(*batch, 200)
    y = module(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    assert (module.in_features, module.out_features) == (200, 72)
    torch.testing.assert_close(module.bias, linear.bias.detach(), rtol=0, atol=0)
    assert_close_to_product(y, x, module.layer.dequantize(), linear.bias)


def test_without_bias(context):
    module = qtorch.QuantLinear.from_linear(context, nn.Linear(64, 48, bias=False), bits=8, group_size=32)
    assert module.bias is None
    assert "bias=False, 8-bit group 32 asymmetric" in repr(module)
    x = torch.randn(7, 64)
    assert_close_to_product(module(x), x, module.layer.dequantize())


def test_gradient_flows_to_the_input(context):
    torch.manual_seed(1)
    module = qtorch.QuantLinear.from_linear(context, nn.Linear(200, 72), bits=4, group_size=-1)
    x = torch.randn(3, 5, 200, requires_grad=True)
    grad_y = torch.randn(3, 5, 72)
    module(x).backward(grad_y)
    assert_close_to_product(x.grad, grad_y, module.layer.dequantize().T)
    assert not any(p.requires_grad for p in module.parameters())


def test_from_gptq_matches_the_oracle(context):
    rng = np.random.default_rng(2)
    oracle = round_to_nearest(rng.standard_normal((128, 40)).astype(np.float32), bits=4, group_size=32)
    tensors = pack(oracle)
    bias = torch.randn(40)
    module = qtorch.QuantLinear.from_gptq(context, tensors["qweight"], tensors["qzeros"], tensors["scales"],
                                          tensors["g_idx"], bias=bias, bits=4)
    x = torch.randn(4, 128)
    assert_close_to_product(module(x), x, oracle.dequantize(), bias)


def test_bad_inputs_raise(context):
    module = qtorch.QuantLinear.from_linear(context, nn.Linear(64, 32), bits=4, group_size=32)
    with pytest.raises(qjit.InvalidArgumentError, match="float64"):
        module(torch.randn(2, 64, dtype=torch.float64))
    with pytest.raises(qjit.InvalidArgumentError, match="meta"):
        module(torch.empty(2, 64, device="meta"))
    with pytest.raises(qjit.InvalidArgumentError, match="in_features = 64"):
        module(torch.randn(2, 63))
    with pytest.raises(TypeError, match="ndarray"):
        module(np.zeros((2, 64), dtype=np.float32))


def test_import_qjit_does_not_import_torch():
    code = "import sys, qjit; assert 'torch' not in sys.modules, 'import qjit imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- from_gptq_model ----

def write_single_layer_checkpoint(directory, name, out_features, in_features):
    w = np.random.default_rng(3).standard_normal((in_features, out_features)).astype(np.float32)
    layer = round_to_nearest(w, bits=4, group_size=32)
    write_checkpoint(directory, {name: layer}, group_size=32, symmetric=False)
    return layer


def test_from_gptq_model_replaces_the_named_linears(context, tmp_path):
    oracle = write_single_layer_checkpoint(tmp_path, "blocks.0.up", 32, 64)
    block = nn.ModuleDict({"up": nn.Linear(64, 32), "down": nn.Linear(32, 64)})
    model = nn.ModuleDict({"blocks": nn.ModuleList([block])})
    bias = model.blocks[0].up.bias.detach().clone()
    assert qtorch.from_gptq_model(model, tmp_path, context) is model
    up = model.blocks[0].up
    assert isinstance(up, qtorch.QuantLinear) and isinstance(model.blocks[0].down, nn.Linear)
    x = torch.randn(5, 64)
    assert_close_to_product(up(x), x, oracle.dequantize(), bias)


def test_from_gptq_model_rejects_mismatches(context, tmp_path):
    write_single_layer_checkpoint(tmp_path, "up", 32, 64)
    with pytest.raises(qjit.InvalidArgumentError, match="up: the checkpoint's layer is 64 -> 32"):
        qtorch.from_gptq_model(nn.ModuleDict({"up": nn.Linear(64, 48)}), tmp_path, context)
    with pytest.raises(qjit.InvalidArgumentError, match="no nn.Linear"):
        qtorch.from_gptq_model(nn.ModuleDict({"down": nn.Linear(64, 32)}), tmp_path, context)
