"""Text in and out of qjit.Model on SmolLM2's real GGUF file (skipped where scripts/fetch_model.sh has
not fetched it): the file's own tokenizer against llama.cpp's token lists, greedy text equal to the
token path, seeded sampling that repeats, streaming, stop strings, the chat template, and bad
input refused with a message naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import qjit
from test_model import SMOLLM2

REFERENCES = Path(__file__).resolve().parents[2] / "tests" / "data" / "tokenizer"


@pytest.fixture(scope="module")
def smollm2() -> qjit.Model:
    if not SMOLLM2.is_file():
        pytest.skip(f"{SMOLLM2} is absent (scripts/fetch_model.sh)")
    return qjit.Model.from_gguf(SMOLLM2, threads=2)


def test_tokenize_equals_llama_cpp(smollm2):
    reference = json.loads((REFERENCES / "smollm2.json").read_text(encoding="utf-8"))
    for case in reference["cases"]:
        assert smollm2.tokenize(case["text"], special=case["parse_special"]) == case["tokens"], case["text"]
    text = "Café naïve, 12345 😀!"
    assert smollm2.detokenize(smollm2.tokenize(text)) == text


def test_greedy_text_is_the_token_path(smollm2):
    prompt = "Once upon a time"
    tokens = smollm2.generate_tokens(smollm2.tokenize(prompt), 24, stop_at_end=False)
    assert len(tokens) == 24
    assert smollm2.generate_tokens(prompt, 24, stop_at_end=False) == tokens
    assert smollm2.generate(prompt, 24, temperature=0) == smollm2.detokenize(tokens)


def test_a_seed_repeats_and_streams_the_same_text(smollm2):
    options = dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.02, repeat_penalty=1.1)
    first = smollm2.generate("The little dog", 32, seed=5, **options)
    assert smollm2.generate("The little dog", 32, seed=5, **options) == first
    assert smollm2.generate("The little dog", 32, seed=6, **options) != first
    pieces = list(smollm2.generate("The little dog", 32, seed=5, stream=True, **options))
    assert len(pieces) > 1 and "".join(pieces) == first


def test_a_closed_stream_stops_and_the_model_goes_on(smollm2):
    stream = smollm2.generate("Once upon a time", 64, stream=True)
    next(stream)
    stream.close()
    assert smollm2.generate("Once upon a time", 4)


def test_a_stream_refuses_bad_options_when_called(smollm2):
    with pytest.raises(qjit.InvalidArgumentError, match="max_tokens is -2"):
        smollm2.generate("Hi", -2, stream=True)
    with pytest.raises(qjit.InvalidArgumentError, match="min_p 1.5"):
        smollm2.chat([{"role": "user", "content": "Hi"}], min_p=1.5, stream=True)


def test_stop_strings_end_the_text_before_them(smollm2):
    full = smollm2.generate("Once upon a time", 48)
    assert "," in full
    assert smollm2.generate("Once upon a time", 48, stop=[","]) == full[:full.index(",")]


def test_chat_in_the_file_template(smollm2):
    reply = smollm2.chat([{"role": "user", "content": "What is the capital of France?"}], 32)
    assert "Paris" in reply
    assert "<|im_end|>" not in reply
    conversation = [{"role": "user", "content": "What is the capital of France?"},
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": "And of Italy?"}]
    assert "Rome" in smollm2.chat(conversation, 32)


@pytest.mark.parametrize("call, message", [
    (lambda m: m.generate("", 4), "prompt: empty"),
    (lambda m: m.generate("\ud800", 4), "not valid text at character 0"),
    (lambda m: m.generate("Hi", 4, top_p=1.5), r"top_p 1\.5 is outside \(0, 1\]"),
    (lambda m: m.generate("Hi", 4, temperature=-1), "temperature"),
    (lambda m: m.generate("Hi", -1), "max_tokens is -1"),
    (lambda m: m.generate([1] * 9000, 1), "context of 8192"),
    (lambda m: m.chat([{"role": "user", "content": "Hi"}], template="alpaca"), "'alpaca'"),
    (lambda m: m.chat([{"role": "robot", "content": "Hi"}]), "robot"),
    (lambda m: m.chat([]), "messages: empty"),
    (lambda m: m.tokenize(b"bytes"), "expected a str"),
])
def test_bad_input_is_refused_by_name(smollm2, call, message):
    with pytest.raises(qjit.InvalidArgumentError, match=message):
        call(smollm2)
