"""qjit.Model: GGUF models run by the models/ code qjit-run runs. stories260K as an fp32 GGUF file
gives the llama2.c reference's logits, greedy tokens and NLL; SmolLM2's Q4_1 file (when
scripts/fetch_model.sh has fetched it) scores as the independent fp32 forward of its weights and
loads through a pack file; bad
files, options and tokens raise qjit errors; the GIL is released while the model computes."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import qjit
import shared_models
from gguf_llama_writer import write_llama_gguf

SMOLLM2 = Path(os.environ.get("QJIT_MODEL_DIR", Path.home() / ".cache" / "qjit" / "models")) / \
    "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def stories_gguf(tmp_path_factory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "stories260K.gguf", *shared_models.stories260k())


@pytest.fixture(scope="module")
def stories_fp32(stories_gguf) -> qjit.Model:
    return qjit.Model.from_gguf(stories_gguf, "fp32")


def reference_sequences() -> list:
    """The NLL reference's 200 sequences: the token file split before each BOS."""
    tokens = shared_models.nll_tokens().astype(np.int64)
    starts = np.flatnonzero(tokens == 1)
    return np.split(tokens, starts[1:])


def test_fp32_logits_and_greedy_tokens_equal_the_reference(stories_fp32):
    tokens = shared_models.greedy_tokens()
    np.testing.assert_allclose(stories_fp32.logits(tokens[:64]), shared_models.greedy_logits(), rtol=0, atol=1e-4)
    assert stories_fp32.generate_tokens(tokens[:1], 64, stop_at_end=False) == tokens[1:65].tolist()
    assert stories_fp32.generate_tokens(tokens[:10], 0) == []


def test_fp32_nll_equals_the_reference(stories_fp32):
    sequences = reference_sequences()
    reference = shared_models.nll_reference()
    score = stories_fp32.score(sequences)
    assert score.tokens == reference["scored_tokens"]
    assert score.mean_nll == pytest.approx(reference["mean_nll_nats"], abs=1e-4)
    assert score.perplexity == pytest.approx(np.exp(score.mean_nll))
    single = stories_fp32.score(sequences[3])  # one sequence: a list of ints
    assert single.sequence_nll == pytest.approx([score.sequence_nll[3]], rel=1e-9)


def test_requantized_model_reports_its_layers(stories_gguf, stories_fp32):
    model = qjit.Model.from_gguf(stories_gguf, "rtn", bits=4, group_size=32, activations="f32")
    info = model.info
    assert (info.n_layers, info.dim, info.vocab_size, info.bos) == (5, 64, 512, 1)
    assert "int4" in info.linears and 4 < info.qjit_bits_per_weight < 6
    sequences = reference_sequences()[:20]
    fp32, rtn = stories_fp32.score(sequences).mean_nll, model.score(sequences).mean_nll
    assert fp32 < rtn < fp32 + 0.5  # 4 bits cost a little, not everything


def test_smollm2_exact_import_scores_as_the_fp32_reference():
    if not SMOLLM2.is_file():
        pytest.skip(f"{SMOLLM2} is missing (scripts/fetch_model.sh fetches it)")
    data = shared_models.models_dir().parent / "smollm2"  # shared/smollm2, beside shared/models
    if not (data / "eval.seq.u32").is_file():
        pytest.skip(f"{data} is missing")
    import json

    raw = np.fromfile(data / "eval.seq.u32", dtype="<u4")
    count = int(raw[0])
    lengths = raw[1:1 + count]
    sequences = np.split(raw[1 + count:].astype(np.int64), np.cumsum(lengths)[:-1])[:6]
    reference = json.loads((data / "eval_fp32_reference.json").read_text())["per_sequence_nll_sum"][:6]
    model = qjit.Model.from_gguf(SMOLLM2, activations="f32")
    assert model.info.linears == "qjit exact GGUF import"
    score = model.score(sequences)
    per_token = (np.array(score.sequence_nll) - reference) / (lengths[:6] - 1)
    assert np.all(np.abs(per_token) < 2e-3), per_token
    generated = model.generate_tokens([1], 8, stop_at_end=False)
    assert len(generated) == 8 and all(0 <= t < model.info.vocab_size for t in generated)
    assert isinstance(model.decode(generated), str)


def test_smollm2_through_a_pack_file(tmp_path):
    if not SMOLLM2.is_file():
        pytest.skip(f"{SMOLLM2} is missing (scripts/fetch_model.sh fetches it)")
    pack = tmp_path / "smollm2.qjitpack"
    tokens = list(range(100, 140))
    written = qjit.Model.from_gguf(SMOLLM2, pack=pack, activations="f32")
    assert written.info.pack == "written (no pack file yet)" and pack.is_file()
    mapped = qjit.Model.from_gguf(SMOLLM2, pack=pack, activations="f32")
    assert mapped.info.pack == "mapped"
    np.testing.assert_array_equal(mapped.logits(tokens), written.logits(tokens))
    with pytest.raises(qjit.InvalidArgumentError, match="pack"):
        qjit.Model.from_gguf(SMOLLM2, "rtn", pack=pack)


def test_the_gil_is_released_while_the_model_computes(stories_gguf):
    model = qjit.Model.from_gguf(stories_gguf, "fp32", threads=1)
    sequences = reference_sequences()
    finished = threading.Event()
    worker = threading.Thread(target=lambda: (model.score(sequences * 2), finished.set()))
    worker.start()
    time.sleep(0.05)  # the worker is in the C++ forward by now
    ran_alongside = 0
    while not finished.is_set() and ran_alongside < 1000:
        ran_alongside += 1  # runs only if the worker let the GIL go
    worker.join()
    assert ran_alongside == 1000


def test_bad_files_options_and_tokens_raise(stories_gguf, stories_fp32, tmp_path):
    with pytest.raises(qjit.FileIOError):
        qjit.Model.from_gguf(tmp_path / "missing.gguf")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(stories_gguf.read_bytes()[: stories_gguf.stat().st_size // 2])
    with pytest.raises(qjit.CorruptDataError):
        qjit.Model.from_gguf(truncated, "fp32")
    with pytest.raises(qjit.InvalidArgumentError, match="importing ggml F32 tensors is not supported"):
        qjit.Model.from_gguf(stories_gguf)  # fp32 tensors have no quantized blocks to import
    for options, message in (({"method": "awq"}, "method is 'awq'"), ({"method": "milo"}, "rank"),
                             ({"method": "gptq"}, "calibration"), ({"method": "fp32", "float_offsets": True}, "float_offsets"),
                             ({"method": "rtn", "activations": "f16"}, "activations")):
        with pytest.raises(qjit.InvalidArgumentError, match=message):
            qjit.Model.from_gguf(stories_gguf, **options)
    for tokens, message in (([1, 512], "outside the vocabulary of 512"), ([1, -3], "not a token id"),
                            ([[1, 2]], "list of token ids"), (np.zeros((2, 2), np.int64), "1-D integer array")):
        with pytest.raises(qjit.InvalidArgumentError, match=message):
            stories_fp32.logits(tokens)
    with pytest.raises(qjit.InvalidArgumentError, match="nothing to predict"):
        stories_fp32.score([[1]])
    with pytest.raises(qjit.InvalidArgumentError, match="context of 512"):
        stories_fp32.generate_tokens([1] * 600, 1)


def test_the_extension_defines_no_c_api_function():
    """The extension links the GGUF reader's internals statically; every qjit_* call must still go to
    libqjit, or two copies of the library's state would be in one process."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    symbols = subprocess.run([nm, "-D", "--defined-only", qjit._native.__file__], check=True, capture_output=True,
                             text=True).stdout.split()
    assert not [s for s in symbols if s.startswith("qjit_")]
