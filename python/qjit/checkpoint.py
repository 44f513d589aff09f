"""qjit.Checkpoint: a GPTQ checkpoint directory or a GGUF file as a mapping of layer name to what the
layer is."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Iterator

from . import _native
from .linear import Linear

_CHECKPOINT_FORMATS = {1: "gptq", 2: "gptq_v2", 3: "gguf"}
_SCALE_DTYPES = {0: "float32", 1: "float16", 2: "bfloat16"}


@dataclasses.dataclass(frozen=True)
class CheckpointLayer:
    """One quantized linear layer of a checkpoint (qjit_checkpoint_layer)."""

    name: str  #: GPTQ: the tensor prefix, e.g. "model.layers.0.self_attn.q_proj"; GGUF: "blk.0.attn_q.weight"
    k: int
    n: int
    bits: int
    group_size: int  #: rows per group; -1 per column
    act_order: bool
    symmetric: bool
    format: str  #: the qjit format it imports to, e.g. "q4g128_asym"
    checkpoint_format: str  #: "gptq", "gptq_v2" or "gguf"
    scale_dtype: str  #: "float16", "bfloat16" or "float32"
    checkpoint_bytes: int
    ggml_type: int  #: a GGUF file's layer: its tensor's ggml type number (12: Q4_K); -1 for GPTQ


class Checkpoint(Mapping):
    """A GPTQ checkpoint (config.json with its quantization_config, model.safetensors or shards), or a
    GGUF file, whose 2-dimensional tensors of the types qjit imports are its layers.

    ``checkpoint[name]`` describes a layer; ``checkpoint.create(name)`` makes it a qjit.Linear on
    the checkpoint's context. Opening checks every layer's tensors against the config: a missing
    file raises FileIOError, a malformed one CorruptDataError, a format qjit cannot import
    UnsupportedError. Layers made stay valid after :meth:`close`.
    """

    def __init__(self, context: Any, path: str | os.PathLike) -> None:
        self.context = context
        self.path = os.fspath(path)
        self._native = _native.Checkpoint(context._native, self.path)
        self._layers = {}
        for record in self._native.layers():
            record["checkpoint_format"] = _CHECKPOINT_FORMATS.get(record["checkpoint_format"], "unknown")
            record["scale_dtype"] = _SCALE_DTYPES.get(record["scale_dtype"], "unknown")
            self._layers[record["name"]] = CheckpointLayer(**record)

    def __getitem__(self, name: str) -> CheckpointLayer:
        return self._layers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._layers)

    def __len__(self) -> int:
        return len(self._layers)

    def create(self, name: str) -> Linear:
        """The layer ``name`` as a qjit.Linear (tuned, or a tuning database hit)."""
        return Linear(self._native.create(name), self.context)

    def close(self) -> None:
        """Unmaps the checkpoint's files; layers already made stay valid."""
        self._native.close()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"qjit.Checkpoint({self.path!r}, {len(self)} layers)"
