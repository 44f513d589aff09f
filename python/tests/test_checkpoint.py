"""qjit.Checkpoint on directories written by gptq_writer.py: the mapping, layers made from it,
and damaged, missing or unsupported checkpoints reported by their error class."""

from __future__ import annotations

import json

import numpy as np
import pytest

import qjit
from gptq_writer import round_to_nearest, write_checkpoint

NAMES = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj", "model.layers.10.self_attn.q_proj",
         "model.layers.2.self_attn.q_proj"]


@pytest.fixture
def checkpoint_dir(tmp_path, rng):
    layers = {name: round_to_nearest(rng.standard_normal((96 if "down" in name else 64, 48), dtype=np.float32),
                                     4, 32, act_order_seed=3) for name in NAMES}
    return write_checkpoint(tmp_path / "checkpoint", layers, group_size=32, symmetric=False, act_order=True), layers


def test_a_checkpoint_is_a_mapping_of_its_layers(exact_context, checkpoint_dir):
    directory, layers = checkpoint_dir
    checkpoint = qjit.Checkpoint(exact_context, directory)
    assert list(checkpoint) == [NAMES[1], NAMES[0], NAMES[3], NAMES[2]]  # natural order: layers.2 before .10
    assert len(checkpoint) == 4 and NAMES[0] in checkpoint and "model.embed_tokens" not in checkpoint
    down = checkpoint[NAMES[1]]
    assert (down.k, down.n, down.bits, down.group_size, down.act_order) == (96, 48, 4, 32, True)
    assert (down.format, down.checkpoint_format, down.scale_dtype) == ("q4g32_asym_act", "gptq", "float16")
    assert down.checkpoint_bytes > 96 * 48 // 2
    for name in NAMES:
        layer = checkpoint.create(name)
        np.testing.assert_array_equal(layer.dequantize(), layers[name].dequantize().astype(np.float32))


def test_layers_outlive_the_closed_checkpoint(exact_context, checkpoint_dir, rng):
    directory, layers = checkpoint_dir
    with qjit.Checkpoint(exact_context, directory) as checkpoint:
        layer = checkpoint.create(NAMES[0])
    x = rng.standard_normal((2, 64), dtype=np.float32)
    assert layer(x).shape == (2, 48)
    with pytest.raises(qjit.InvalidArgumentError, match="closed"):
        checkpoint.create(NAMES[0])


def test_an_unknown_layer_name_is_refused(exact_context, checkpoint_dir):
    checkpoint = qjit.Checkpoint(exact_context, checkpoint_dir[0])
    with pytest.raises(qjit.InvalidArgumentError, match="model.layers.99"):
        checkpoint.create("model.layers.99.mlp.up_proj")
    with pytest.raises(KeyError):
        checkpoint["model.layers.99.mlp.up_proj"]


def test_a_missing_directory_is_an_io_error(exact_context, tmp_path):
    with pytest.raises(qjit.FileIOError, match="nowhere"):
        qjit.Checkpoint(exact_context, tmp_path / "nowhere")


def test_a_truncated_tensor_file_is_corrupt_data(exact_context, checkpoint_dir):
    directory, _ = checkpoint_dir
    tensors = directory / "model.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-100])
    with pytest.raises(qjit.CorruptDataError, match="model.safetensors"):
        qjit.Checkpoint(exact_context, directory)


def test_another_quantization_method_is_unsupported(exact_context, checkpoint_dir):
    directory, _ = checkpoint_dir
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"]["quant_method"] = "awq"
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(qjit.UnsupportedError, match="awq"):
        qjit.Checkpoint(exact_context, directory)
