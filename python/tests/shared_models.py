"""The stories260K model and its golden outputs in shared/models (see its README.md): located at
<repo>/../shared/models or $QJIT_SHARED_MODELS_DIR; tests that need them skip where they are missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import llama2


def models_dir() -> Path:
    """The shared models folder; skips the calling test where it is missing."""
    default = Path(__file__).resolve().parents[2].parent / "shared" / "models"
    path = Path(os.environ.get("QJIT_SHARED_MODELS_DIR", default))
    if not (path / "stories260K" / "stories260K.bin").is_file():
        pytest.skip(f"the shared models folder {path} is missing (set QJIT_SHARED_MODELS_DIR)")
    return path


def reference(name: str) -> Path:
    return models_dir() / "reference" / name


def stories260k() -> tuple[llama2.Config, dict]:
    """The checkpoint's config and float32 weights."""
    return llama2.load_checkpoint(models_dir() / "stories260K" / "stories260K.bin")


def greedy_tokens() -> np.ndarray:
    """BOS and the 256 tokens of the float64 reference's greedy decode."""
    return np.fromfile(reference("stories260K_greedy_tokens.i32"), dtype="<i4")


def greedy_logits() -> np.ndarray:
    """The reference logits [64][vocab] for the inputs greedy_tokens()[:64]."""
    return np.fromfile(reference("stories260K_greedy_logits_64x512.f32"), dtype="<f4").reshape(64, -1)


def nll_tokens() -> np.ndarray:
    """The perplexity set: 200 BOS-led sequences, concatenated."""
    return np.fromfile(reference("tinystories_val_first200para.tok512.u16"), dtype="<u2")


def nll_reference() -> dict:
    """The fp32 reference NLL: mean_nll_nats, scored_tokens and per_paragraph[i]["nll_sum"]."""
    return json.loads(reference("stories260K_tinystories_val_first200para_nll.json").read_text())
