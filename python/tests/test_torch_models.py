"""qjit.torch.quantize_model, save_quantized and load_quantized on a Hugging Face Llama holding
stories260K's weights: greedy generation equal to the model with the layers' dequantized weights,
a saved folder loaded back without quantizing, calibrated methods, and bad folders refused."""

import copy
import json

import numpy as np
import pytest

import qjit

torch = pytest.importorskip("torch")
nn = torch.nn
qtorch = pytest.importorskip("qjit.torch")
pytest.importorskip("transformers")

import shared_models  # noqa: E402
from hf_llama import hf_stories260k, logits_of  # noqa: E402,F401 (a fixture)

PROMPT = shared_models.greedy_tokens  # BOS and the reference's greedy tokens


def linear_names(model):
    return {name for name, module in model.named_modules() if isinstance(module, nn.Linear)}


def dequantized_twin(float_model, quantized):
    """float_model with each quantized layer's weights replaced by what the layer dequantizes to."""
    twin = copy.deepcopy(float_model)
    for name, module in quantized.named_modules():
        if isinstance(module, qtorch.QuantLinear):
            twin.get_submodule(name).weight.data = torch.from_numpy(module.layer.dequantize().T.copy())
    return twin


def greedy(model, steps=32):
    prompt = torch.as_tensor(PROMPT()[:8], dtype=torch.long)[None]
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=steps, do_sample=False, min_new_tokens=steps)
    return out[0, 8:].tolist()


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_generate_equals_the_dequantized_model(hf_stories260k, exact_context, bits):
    quantized = qtorch.quantize_model(copy.deepcopy(hf_stories260k), bits=bits, group_size=32, context=exact_context)
    replaced = {name for name, module in quantized.named_modules() if isinstance(module, qtorch.QuantLinear)}
    assert replaced == linear_names(hf_stories260k) - {"lm_head"}  # the classifier is skipped
    twin = dequantized_twin(hf_stories260k, quantized)
    tokens = greedy(quantized)
    assert tokens == greedy(twin)
    if bits <= 3:  # few bits do change what the model says
        assert tokens != greedy(hf_stories260k)


def test_skip_names_and_quantize_everything(hf_stories260k, exact_context):
    model = qtorch.quantize_model(copy.deepcopy(hf_stories260k), context=exact_context, group_size=32,
                                  skip=["lm_head", "down_proj", "model.layers.0.self_attn.q_proj"])
    kept = linear_names(model)
    assert kept == {"lm_head", "model.layers.0.self_attn.q_proj"} | {
        f"model.layers.{i}.mlp.down_proj" for i in range(len(model.model.layers))}
    everything = qtorch.quantize_model(copy.deepcopy(hf_stories260k), context=exact_context, group_size=32, skip=())
    assert linear_names(everything) == set()


def test_save_and_load_without_quantizing(hf_stories260k, exact_context, tmp_path):
    quantized = qtorch.quantize_model(copy.deepcopy(hf_stories260k), bits=3, group_size=32, context=exact_context)
    qtorch.save_quantized(quantized, tmp_path)
    manifest = json.loads((tmp_path / "qjit_model.json").read_text())
    assert manifest["quantization"] == {"bits": 3, "group_size": 32, "method": "rtn"}
    assert set(manifest["layers"]) == linear_names(hf_stories260k) - {"lm_head"}
    tokens = PROMPT()[:40]
    expected = logits_of(quantized, tokens)

    loaded = qtorch.load_quantized(tmp_path, context=exact_context)  # a transformers model from config.json
    torch.testing.assert_close(logits_of(loaded, tokens), expected, rtol=0, atol=0)
    into = qtorch.load_quantized(tmp_path, model=copy.deepcopy(hf_stories260k), context=exact_context)
    torch.testing.assert_close(logits_of(into, tokens), expected, rtol=0, atol=0)
    assert greedy(loaded) == greedy(quantized)


def test_calibrated_gptq_fits_the_calibration_better_than_rtn(hf_stories260k, exact_context):
    calibration = torch.as_tensor(shared_models.nll_tokens()[:512].astype(np.int64)).reshape(4, 128)
    tokens = calibration[0]
    reference = logits_of(hf_stories260k, tokens)
    errors = {}
    for method in ("rtn", "gptq"):
        model = qtorch.quantize_model(copy.deepcopy(hf_stories260k), bits=3, group_size=32, method=method,
                                      calibration=calibration if method == "gptq" else None, context=exact_context)
        errors[method] = (logits_of(model, tokens) - reference).pow(2).mean().item()
    assert errors["gptq"] < errors["rtn"], errors


def test_bad_calls_and_folders_are_refused(hf_stories260k, exact_context, tmp_path):
    with pytest.raises(qjit.InvalidArgumentError, match="no QuantLinear"):
        qtorch.save_quantized(hf_stories260k, tmp_path)
    with pytest.raises(qjit.InvalidArgumentError, match="calibration"):
        qtorch.quantize_model(copy.deepcopy(hf_stories260k), method="gptq", group_size=32, context=exact_context)
    with pytest.raises(qjit.FileIOError, match="qjit_model.json: missing"):
        qtorch.load_quantized(tmp_path / "nowhere")

    quantized = qtorch.quantize_model(copy.deepcopy(hf_stories260k), group_size=32, context=exact_context)
    qtorch.save_quantized(quantized, tmp_path)
    manifest_path = tmp_path / "qjit_model.json"
    manifest = json.loads(manifest_path.read_text())
    layer_file = tmp_path / manifest["layers"]["model.layers.0.mlp.up_proj"]["file"]
    data = bytearray(layer_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    layer_file.write_bytes(bytes(data))
    with pytest.raises(qjit.CorruptDataError):
        qtorch.load_quantized(tmp_path, context=exact_context)

    for broken, message in (({**manifest, "version": 9}, "version 9"),
                            ({**manifest, "format": "other"}, "not a qjit model manifest"),
                            ({**manifest, "layers": {"lm_head": {"file": "../x.qjit", "bias": False}}}, "inside the folder")):
        manifest_path.write_text(json.dumps(broken))
        with pytest.raises(qjit.InvalidArgumentError, match=message):
            qtorch.load_quantized(tmp_path, context=exact_context)
    manifest_path.write_text("{not json")
    with pytest.raises(qjit.InvalidArgumentError, match="not valid JSON"):
        qtorch.load_quantized(tmp_path, context=exact_context)
