"""Whole PyTorch models in one call: every nn.Linear quantized into a QuantLinear, saved as a folder
of qjit layer files, and loaded back without quantizing again.

    model = transformers.AutoModelForCausalLM.from_pretrained(...)      # float32, on the CPU
    qjit.torch.quantize_model(model, bits=4, group_size=128)            # the classifier stays as it is
    model.generate(input_ids, max_new_tokens=32)
    qjit.torch.save_quantized(model, "model-qjit")
    model = qjit.torch.load_quantized("model-qjit")                     # a transformers model again
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Optional

import torch
from torch import nn

from .. import _native
from ..context import Context
from ..errors import FileIOError, InvalidArgumentError
from ..linear import Calibration, Linear
from .modules import QuantLinear

MANIFEST = "qjit_model.json"
STATE = "state.pt"
FORMAT = "qjit-quantized-model"
VERSION = 1


def quantize_model(model: nn.Module, bits: int = 4, group_size: int = 128, method: str = "rtn", *,
                   skip: Optional[Iterable[str]] = None, calibration: Any = None, context: Optional[Context] = None,
                   **options: Any) -> nn.Module:
    """Replaces every ``nn.Linear`` of ``model`` but those skipped by a :class:`QuantLinear`.

    Each layer is quantized with ``qjit.Linear.quantize(context, weight, bits, group_size,
    method=method, **options)`` and keeps its bias. The model must run in float32 on the CPU (or,
    with a CUDA context, in float16 or bfloat16 on that device).

    Args:
        skip: module names left as they are: a qualified name ("model.layers.0.mlp.down_proj") or
            its last part ("lm_head"). None skips the classifier: the module
            ``model.get_output_embeddings()`` returns (transformers models), else one named
            "lm_head". ``()`` quantizes every linear layer.
        calibration: token ids (a LongTensor (batch, sequence), or a list of them) the float model
            runs on once, before any layer is replaced, to collect each layer's inputs: the
            calibrated methods ("gptq", "mixed", and "hqq" or "milo" when given) learn from them.
        context: the qjit.Context the layers run on; None for ``qjit.Context()``.
        options: the method's options, as ``qjit.Linear.quantize`` takes them.

    Returns ``model``, modified in place, in eval mode.
    """
    context = Context() if context is None else context
    targets = _linear_targets(model, skip)
    if not targets:
        raise InvalidArgumentError("the model has no nn.Linear to quantize (beyond those skipped)")
    calibrations = _collect_calibrations(model, targets, calibration) if calibration is not None else {}
    for name, module in targets:
        quantized = QuantLinear.from_linear(context, module, bits=bits, group_size=group_size, method=method,
                                            calibration=calibrations.get(name), **options)
        _replace(model, name, quantized)
    model.qjit_quantization = {"bits": bits, "group_size": group_size, "method": method,
                               **{key: value for key, value in options.items() if _is_plain(value)}}
    return model.eval()


def save_quantized(model: nn.Module, directory: str | os.PathLike) -> None:
    """Saves a model whose linear layers are QuantLinear into ``directory`` (created if needed):

    - ``layers/NAME.qjit``: each QuantLinear's packed layer, in qjit's checked file format;
    - ``state.pt``: the rest of the model's state (embeddings, norms, the biases), ``torch.save``'d;
    - ``qjit_model.json``: the layers' names and files, and how they were quantized;
    - ``config.json``: the model's configuration, for a transformers model (``model.config``).
    """
    directory = Path(directory)
    quantized = {name: module for name, module in model.named_modules() if isinstance(module, QuantLinear)}
    if not quantized:
        raise InvalidArgumentError("the model holds no QuantLinear: quantize it first (qjit.torch.quantize_model)")
    (directory / "layers").mkdir(parents=True, exist_ok=True)
    layers = {}
    for name, module in quantized.items():
        file = f"layers/{name}.qjit"
        module.layer.save(directory / file)
        layers[name] = {"file": file, "in_features": module.in_features, "out_features": module.out_features,
                        "bias": module.bias is not None}
    torch.save(model.state_dict(), directory / STATE)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "save_pretrained"):
        config.save_pretrained(directory)
    manifest = {"format": FORMAT, "version": VERSION, "qjit_version": _native.version(),
                "quantization": getattr(model, "qjit_quantization", {}), "layers": layers}
    _write_atomically(directory / MANIFEST, json.dumps(manifest, indent=1) + "\n")


def load_quantized(directory: str | os.PathLike, model: Optional[nn.Module] = None,
                   context: Optional[Context] = None) -> nn.Module:
    """Loads a model that :func:`save_quantized` saved, without quantizing anything.

    Args:
        model: the model's architecture with float layers, e.g. built from its config; None for a
            transformers causal LM built from the folder's config.json (``AutoModelForCausalLM``).
            Its linear layers named in the folder become QuantLinear; then the saved state is loaded
            into it, strictly.
        context: the qjit.Context the layers run on; None for ``qjit.Context()``.

    Raises:
        FileIOError: a file of the folder is missing. CorruptDataError: a damaged layer file.
        InvalidArgumentError: a manifest qjit does not know, or a layer that does not fit its module.
    """
    directory = Path(directory)
    manifest = _read_manifest(directory)
    context = Context() if context is None else context
    if model is None:
        model = _transformers_model(directory)
    for name, entry in manifest["layers"].items():
        module = _module(model, name)
        layer = Linear.load(context, directory / entry["file"])
        if (layer.in_features, layer.out_features) != (module.in_features, module.out_features):
            raise InvalidArgumentError(f"{name}: the saved layer is {layer.in_features} -> {layer.out_features} "
                                       f"features, the model's module {module.in_features} -> {module.out_features}")
        bias = torch.zeros(layer.out_features) if entry["bias"] else None  # its values come with the state
        _replace(model, name, QuantLinear(layer, bias))
    state_path = directory / STATE
    if not state_path.is_file():
        raise FileIOError(f"{state_path}: missing; save_quantized writes it beside {MANIFEST}")
    model.load_state_dict(torch.load(state_path, map_location="cpu", weights_only=True), strict=True)
    model.qjit_quantization = manifest.get("quantization", {})
    return model.eval()


def _linear_targets(model: nn.Module, skip: Optional[Iterable[str]]) -> list:
    if skip is None:
        output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        skipped_modules = {id(output)} if isinstance(output, nn.Linear) else set()
        skipped_names = set() if skipped_modules else {"lm_head"}
    else:
        skipped_modules, skipped_names = set(), set(skip)
    return [(name, module) for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and id(module) not in skipped_modules
            and name not in skipped_names and name.rpartition(".")[2] not in skipped_names]


def _collect_calibrations(model: nn.Module, targets: list, calibration: Any) -> dict:
    """Each target's inputs while the float model runs on the calibration tokens, as Calibrations."""
    batches = calibration if isinstance(calibration, (list, tuple)) else [calibration]
    calibrations = {name: Calibration(module.in_features) for name, module in targets}

    def hook(name: str):
        def collect(module: nn.Module, inputs: tuple) -> None:
            calibrations[name].add(inputs[0].detach().to(device="cpu", dtype=torch.float32).contiguous())
        return collect

    handles = [module.register_forward_pre_hook(hook(name)) for name, module in targets]
    try:
        with torch.no_grad():
            for batch in batches:
                batch = torch.as_tensor(batch)
                model(batch[None] if batch.dim() == 1 else batch)
    finally:
        for handle in handles:
            handle.remove()
    return calibrations


def _module(model: nn.Module, name: str) -> nn.Module:
    try:
        module = model.get_submodule(name)
    except AttributeError:
        raise InvalidArgumentError(f"{name}: the model has no such module") from None
    if not isinstance(module, (nn.Linear, QuantLinear)):
        raise InvalidArgumentError(f"{name}: the model's module is a {type(module).__name__}, not an nn.Linear")
    return module


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child_name = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child_name, module)


def _read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileIOError(f"{path}: missing; is {directory} a folder save_quantized wrote?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InvalidArgumentError(f"{path}: not a qjit model manifest (format is not {FORMAT!r})")
    if manifest.get("version") != VERSION:
        raise InvalidArgumentError(f"{path}: version {manifest.get('version')!r}; this qjit reads version {VERSION}")
    layers = manifest.get("layers")
    if not isinstance(layers, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("file"), str) and isinstance(entry.get("bias"), bool)
            and not os.path.isabs(entry["file"]) and ".." not in Path(entry["file"]).parts
            for entry in layers.values()):
        raise InvalidArgumentError(f"{path}: 'layers' must map each module name to its file inside the folder "
                                   "and whether it has a bias")
    return manifest


def _transformers_model(directory: Path) -> nn.Module:
    if not (directory / "config.json").is_file():
        raise FileIOError(f"{directory / 'config.json'}: missing; without a transformers config, pass the "
                          "model's architecture as model=")
    import transformers

    config = transformers.AutoConfig.from_pretrained(directory)
    return transformers.AutoModelForCausalLM.from_config(config)


def _is_plain(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str)) or value is None


def _write_atomically(path: Path, text: str) -> None:
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text, encoding="utf-8")
    os.replace(scratch, path)
