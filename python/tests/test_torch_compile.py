"""qjit's forward as a PyTorch operator: torch.compile traces QuantLinear without a graph break, the
compiled forward and gradient equal the eager ones, and a Hugging Face Llama (stories260K's weights)
with every linear quantized compiles whole and computes what it computes eagerly."""

import copy
import gc

import pytest

import qjit

torch = pytest.importorskip("torch")
nn = torch.nn
qtorch = pytest.importorskip("qjit.torch")

from hf_llama import hf_stories260k, logits_of  # noqa: E402,F401 (a fixture)


def small_model(context):
    """Two quantized layers around a ReLU; K = 200 and 72 are not multiples of the group of 64."""
    torch.manual_seed(0)
    return nn.Sequential(qtorch.QuantLinear.from_linear(context, nn.Linear(200, 72), bits=4, group_size=64),
                         nn.ReLU(),
                         qtorch.QuantLinear.from_linear(context, nn.Linear(72, 40, bias=False), bits=3, group_size=64))


@pytest.mark.parametrize("batch", [(1,), (5,), (2, 3)])
def test_compiled_forward_has_no_graph_break_and_equals_eager(exact_context, batch):
    model = small_model(exact_context)
    x = torch.randn(*batch, 200)
    with torch.no_grad():
        explanation = torch._dynamo.explain(model)(x)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        assert explanation.graph_count == 1
        assert "qjit.linear_out" in explanation.graphs[0].code
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True)
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)


def test_one_compiled_model_takes_every_batch(exact_context):
    model = small_model(exact_context)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for rows in (1, 7, 100, 3):
            x = torch.randn(rows, 200)
            torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)


def test_compiled_gradient_equals_eager(exact_context):
    model = small_model(exact_context)
    x = torch.randn(3, 200, requires_grad=True)
    grad_y = torch.randn(3, 40)
    model(x).backward(grad_y)
    expected = x.grad.clone()
    x.grad = None
    torch._dynamo.reset()
    torch.compile(model, fullgraph=True)(x).backward(grad_y)
    torch.testing.assert_close(x.grad, expected, rtol=1e-6, atol=1e-6)


def test_a_deleted_layer_is_released(exact_context):
    from qjit.torch import ops

    module = qtorch.QuantLinear.from_linear(exact_context, nn.Linear(64, 32), bits=4, group_size=32)
    number = module._number
    assert ops._LAYERS[number] is module.layer
    del module
    gc.collect()
    assert number not in ops._LAYERS


def test_hf_llama_compiles_whole_and_equals_eager(hf_stories260k, exact_context):
    import shared_models

    model = qtorch.quantize_model(copy.deepcopy(hf_stories260k), bits=4, group_size=32, context=exact_context)
    tokens = torch.as_tensor(shared_models.greedy_tokens()[:48], dtype=torch.long)[None]
    with torch.no_grad():
        explanation = torch._dynamo.explain(model)(tokens)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True)
        # Inductor fuses the norms and attention differently from eager: fp32 rounding apart.
        torch.testing.assert_close(compiled(tokens).logits[0], logits_of(model, tokens[0]), rtol=0, atol=1e-4)
