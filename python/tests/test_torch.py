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

from conftest import forward_bound  # noqa: E402
from gptq_writer import pack, round_to_nearest, write_checkpoint  # noqa: E402
from hf_llama import hf_stories260k, logits_of  # noqa: E402,F401 (a fixture)


def assert_close_to_product(actual, x, w_kn, bias=None):
    """actual == x @ w_kn (+ bias) within fp32 rounding (conftest's bound, plus the bias's addition)."""
    x, w_kn = np.asarray(x.detach()), np.asarray(w_kn)
    expected = x.astype(np.float64) @ w_kn.astype(np.float64)
    if bias is not None:
        expected += np.asarray(bias.detach(), dtype=np.float64)
    bound = forward_bound(x, w_kn, int8_activations=False) + np.finfo(np.float32).eps * np.abs(expected)
    error = np.abs(actual.detach().numpy().astype(np.float64) - expected)
    assert actual.shape == expected.shape
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), f"error {error[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"


@pytest.mark.parametrize("batch", [(1,), (3, 5)])
def test_forward_is_x_times_dequantized_weights_plus_bias(exact_context, batch):
    torch.manual_seed(0)
    linear = nn.Linear(200, 72)
    module = qtorch.QuantLinear.from_linear(exact_context, linear, bits=4, group_size=-1)
    x = torch.randn(*batch, 200)
    y = module(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    assert (module.in_features, module.out_features) == (200, 72)
    torch.testing.assert_close(module.bias, linear.bias.detach(), rtol=0, atol=0)
    assert_close_to_product(y, x, module.layer.dequantize(), linear.bias)


def test_without_bias(exact_context):
    module = qtorch.QuantLinear.from_linear(exact_context, nn.Linear(64, 48, bias=False), bits=8, group_size=32)
    assert module.bias is None
    assert "bias=False, 8-bit group 32 asymmetric" in repr(module)
    x = torch.randn(7, 64)
    assert_close_to_product(module(x), x, module.layer.dequantize())


def test_gradient_flows_to_the_input(exact_context):
    torch.manual_seed(1)
    module = qtorch.QuantLinear.from_linear(exact_context, nn.Linear(200, 72), bits=4, group_size=-1)
    x = torch.randn(3, 5, 200, requires_grad=True)
    grad_y = torch.randn(3, 5, 72)
    module(x).backward(grad_y)
    assert_close_to_product(x.grad, grad_y, module.layer.dequantize().T)
    assert not any(p.requires_grad for p in module.parameters())


def test_from_gptq_matches_the_oracle(exact_context, rng):
    oracle = round_to_nearest(rng.standard_normal((128, 40)).astype(np.float32), bits=4, group_size=32)
    tensors = pack(oracle)
    bias = torch.randn(40)
    module = qtorch.QuantLinear.from_gptq(exact_context, tensors["qweight"], tensors["qzeros"], tensors["scales"],
                                          tensors["g_idx"], bias=bias, bits=4)
    x = torch.randn(4, 128)
    assert_close_to_product(module(x), x, oracle.dequantize(), bias)


def test_bad_inputs_raise(exact_context):
    module = qtorch.QuantLinear.from_linear(exact_context, nn.Linear(64, 32), bits=4, group_size=32)
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


def test_from_gptq_model_replaces_the_named_linears(exact_context, tmp_path):
    oracle = write_single_layer_checkpoint(tmp_path, "blocks.0.up", 32, 64)
    block = nn.ModuleDict({"up": nn.Linear(64, 32), "down": nn.Linear(32, 64)})
    model = nn.ModuleDict({"blocks": nn.ModuleList([block])})
    bias = model.blocks[0].up.bias.detach().clone()
    assert qtorch.from_gptq_model(model, tmp_path, exact_context) is model
    up = model.blocks[0].up
    assert isinstance(up, qtorch.QuantLinear) and isinstance(model.blocks[0].down, nn.Linear)
    x = torch.randn(5, 64)
    assert_close_to_product(up(x), x, oracle.dequantize(), bias)


def test_from_gptq_model_rejects_mismatches(exact_context, tmp_path):
    write_single_layer_checkpoint(tmp_path, "up", 32, 64)
    with pytest.raises(qjit.InvalidArgumentError, match="up: the checkpoint's layer is 64 -> 32"):
        qtorch.from_gptq_model(nn.ModuleDict({"up": nn.Linear(64, 48)}), tmp_path, exact_context)
    with pytest.raises(qjit.InvalidArgumentError, match="no nn.Linear"):
        qtorch.from_gptq_model(nn.ModuleDict({"down": nn.Linear(64, 32)}), tmp_path, exact_context)


# ---- a Hugging Face Llama with stories260K's weights ----

def test_hf_llama_with_stories260k_weights_matches_reference(hf_stories260k):
    import shared_models

    logits = logits_of(hf_stories260k, shared_models.greedy_tokens()[:64])
    torch.testing.assert_close(logits, torch.from_numpy(shared_models.greedy_logits()), rtol=0, atol=1e-4)


def test_hf_llama_from_gptq_checkpoint(hf_stories260k, exact_context, tmp_path):
    import shared_models

    # 4-bit in groups of 32 rows; down_proj's K = 172 ends in a group of 12.
    oracles = {name: round_to_nearest(module.weight.detach().numpy().T, bits=4, group_size=32)
               for name, module in hf_stories260k.named_modules()
               if isinstance(module, nn.Linear) and name != "lm_head"}
    write_checkpoint(tmp_path, oracles, group_size=32, symmetric=False)

    quantized = qtorch.from_gptq_model(copy.deepcopy(hf_stories260k), tmp_path, exact_context)
    replaced = {name for name, module in quantized.named_modules() if isinstance(module, qtorch.QuantLinear)}
    assert replaced == set(oracles)

    dequantized = copy.deepcopy(hf_stories260k)
    for name, oracle in oracles.items():
        dequantized.get_submodule(name).weight.data = torch.from_numpy(oracle.dequantize().T.astype(np.float32))

    tokens = shared_models.greedy_tokens()[:64]
    expected = logits_of(dequantized, tokens)
    torch.testing.assert_close(logits_of(quantized, tokens), expected, rtol=0, atol=1e-4)
    assert (expected - logits_of(hf_stories260k, tokens)).abs().max() > 0.05  # 4-bit weights do change them
