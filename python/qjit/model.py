"""qjit.Model: a Llama-architecture GGUF model (llama.cpp's model files) scored and decoded by qjit.

    import qjit
    model = qjit.Model.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    model.generate("Once upon a time", 32)    # text in, text out (greedy; temperature=... samples)
    model.chat([{"role": "user", "content": "Hi!"}])  # the file's chat template
    model.tokenize("Once upon a time")        # the file's own tokenizer, as llama.cpp's
    model.score([tokens]).mean_nll            # nats per predicted token

The model code is qjit-run's (docs/models.md): the same loader, layers, forward and scoring, so the
numbers equal qjit-run's for the same options. The GIL is released while the model computes; calls
on one model run one at a time (it holds one KV cache).
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import threading
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np

from . import _native
from .context import ACTIVATIONS, ISAS, choice
from .errors import InvalidArgumentError

METHODS = ("exact", "fp32", "rtn", "hqq", "milo", "gptq", "mixed")
MILO_BASES = ("hqq", "rtn", "gptq")


@dataclasses.dataclass(frozen=True)
class Score:
    """The negative log-likelihood of token sequences, each scored from an empty KV cache."""

    mean_nll: float  #: nats per predicted token (every token but each sequence's first)
    tokens: int  #: predicted tokens
    sequence_nll: list  #: each sequence's NLL sum

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean_nll)


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What a model is and how its linear layers are held."""

    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    context_length: int
    bos: Optional[int]  #: the file's BOS token, if it names one
    eos: Optional[int]  #: the file's EOS token, if it names one
    linears: str  #: how the linear layers were made, e.g. "qjit exact GGUF import"
    linear_weights: int  #: weights of every linear layer, the classifier's included
    stored_bytes: int  #: the bytes those layers store
    qjit_bits_per_weight: Optional[float]  #: of the qjit layers; None where all are dense fp32
    quantization_seconds: float
    calibration_seconds: float
    pack: Optional[str]  #: loaded through a pack file: "mapped", or "written (<why>)"; else None


class Model:
    """A Llama-architecture model ("llama", "qwen2", "qwen3") from a GGUF file; see :meth:`from_gguf`."""

    __slots__ = ("_native", "path")

    def __init__(self, native: Any, path: str) -> None:
        """Internal: models come from :meth:`from_gguf`."""
        self._native = native
        self.path = path

    @classmethod
    def from_gguf(cls, path: str | os.PathLike, method: str = "exact", *, bits: int = 4, group_size: int = 64,
                  calibration: Optional[Sequence[Sequence[int]]] = None, rank: int = 0, milo_base: str = "hqq",
                  float_offsets: Optional[bool] = None, act_order: bool = False, bits_per_weight: float = 0.0,
                  fp32_classifier: bool = False, pack: Optional[str | os.PathLike] = None, threads: int = 0,
                  activations: str = "auto", max_isa: str = "auto") -> "Model":
        """Loads a GGUF model and makes its linear layers, as ``qjit-run --method METHOD`` does.

        Args:
            method: "exact" (the file's own quantized weights imported bit for bit), "fp32" (dense
                fp32 loops over the dequantized weights), or a qjit quantizer requantizing the
                dequantized weights: "rtn", "hqq", "milo", "gptq" or "mixed".
            bits, group_size: the quantizers' width (2, 3, 4 or 8) and rows per group.
            calibration: token sequences the calibrated methods run the model on (gptq needs them;
                hqq, milo and mixed use them when given), layer by layer.
            rank: milo's compensator rank (required by milo). milo_base: its base quantizer.
            float_offsets: rtn, hqq, milo: a real offset per group (True) or integer zero points
                (False); None: the method's measured choice (offsets for hqq only).
                act_order: gptq, mixed.
            bits_per_weight: mixed: the 4-bit groups of each matrix within this budget.
            fp32_classifier: keep the classifier in dense fp32 loops whatever the method.
            pack: method "exact": a pack file (docs/formats.md) the layers are mapped from when it
                was made from this file for this machine's kernels, else imported and written to
                (``info.pack`` says which), as ``qjit-run --pack``: a large model loads in a
                fraction of a second the second time.
            threads: 0 for one per core. activations: "auto", "f32" (exact) or "int8".
            max_isa: cap on the instruction set, as qjit.Context takes it.

        Raises:
            FileIOError, CorruptDataError: the file cannot be read, or is damaged or truncated.
            InvalidArgumentError: a bad option, or a model the code does not run (the message says what).
        """
        if method not in METHODS:
            raise InvalidArgumentError(f"method is {method!r}; expected one of {', '.join(map(repr, METHODS))}")
        if milo_base not in MILO_BASES:
            raise InvalidArgumentError(f"milo_base is {milo_base!r}; expected one of {', '.join(map(repr, MILO_BASES))}")
        if (method == "milo") != (rank > 0):
            raise InvalidArgumentError(f"rank is {rank}: method 'milo' needs a rank > 0, and only milo takes one")
        if method == "gptq" or (method == "milo" and milo_base == "gptq"):
            if not calibration:
                raise InvalidArgumentError(f"method {method!r} (gptq) needs calibration token sequences")
        if float_offsets is not None and not (method in ("rtn", "hqq") or (method == "milo" and milo_base != "gptq")):
            raise InvalidArgumentError("float_offsets goes with method 'rtn', 'hqq', or 'milo' over rtn or hqq")
        if act_order and method not in ("gptq", "mixed"):
            raise InvalidArgumentError("act_order goes with method 'gptq' or 'mixed'")
        if bits_per_weight and method != "mixed":
            raise InvalidArgumentError("bits_per_weight goes with method 'mixed'")
        if pack is not None and method != "exact":
            raise InvalidArgumentError("pack holds the exact import's layers: it goes with method 'exact'")
        if calibration and method in ("exact", "fp32", "rtn"):
            raise InvalidArgumentError(f"method {method!r} takes no calibration")
        options = _native.MethodOptions()
        options.method = method
        options.bits, options.group_size, options.rank = int(bits), int(group_size), int(rank)
        options.milo_base, options.act_order = milo_base, bool(act_order)
        options.float_offsets = None if float_offsets is None else bool(float_offsets)
        options.bits_per_weight = float(bits_per_weight)
        sequences = [_tokens(s, "calibration") for s in (calibration or [])]
        path = os.fspath(path)
        native = _native.Model(path, options, bool(fp32_classifier), "" if pack is None else os.fspath(pack),
                               int(threads), choice(ACTIVATIONS, activations, "activations"),
                               choice(ISAS, max_isa, "max_isa"), sequences)
        return cls(native, path)

    def score(self, sequences: Any) -> Score:
        """The NLL of token sequences, each from an empty KV cache in one batched forward, as
        qjit-run and llama.cpp's perplexity tools score them. ``sequences``: one sequence (a list
        or 1-D array of token ids) or a list of them; together they must predict a token."""
        if _is_sequence_of_ints(sequences):
            sequences = [sequences]
        token_lists = [_tokens(s, "tokens") for s in sequences]
        if sum(max(len(s) - 1, 0) for s in token_lists) == 0:
            raise InvalidArgumentError("tokens: nothing to predict; a sequence needs at least 2 tokens")
        mean_nll, tokens, sequence_nll = self._native.score(token_lists)
        return Score(mean_nll=mean_nll, tokens=tokens, sequence_nll=list(sequence_nll))

    def logits(self, tokens: Any) -> np.ndarray:
        """The logits of every position of one sequence, from an empty KV cache: (T, vocab) float32."""
        return self._native.logits(_tokens(tokens, "tokens"))

    def tokenize(self, text: str, bos: bool = True, special: bool = False) -> list[int]:
        """The tokens of ``text`` by the file's own tokenizer, as llama.cpp's ``llama_tokenize``:
        ``bos`` adds BOS (and EOS) where the file says its model takes them; ``special`` reads
        control tokens written in the text (``"<|im_start|>"``) as those tokens."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text: expected a str, got {type(text).__name__}")
        return list(self._native.tokenize(_utf8(text, "text"), bool(bos), bool(special)))

    def detokenize(self, tokens: Any) -> str:
        """The text of tokens, as llama.cpp prints them (control tokens print as nothing)."""
        return self._native.decode(_tokens(tokens, "tokens")).decode("utf-8", errors="replace")

    decode = detokenize

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 128, *, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repeat_penalty: float = 1.0,
                 repeat_last_n: int = 64, seed: int = 0, stop: Sequence[str] = (),
                 stream: bool = False) -> Union[str, Iterator[str]]:
        """The text that follows ``prompt`` (text, tokenized with BOS as the file says, or token
        ids), up to ``max_tokens`` tokens, an end-of-text token or one of the ``stop`` strings.

        ``temperature`` 0 is greedy (the default); above 0 tokens are drawn after llama.cpp's
        chain: repetition penalty, top-k, top-p, min-p, temperature (docs/models.md). The same
        ``seed`` and options repeat the same text on any machine. With ``stream`` an iterator yields
        the text as it comes, whole characters at a time. The KV cache keeps what it holds between
        calls: a prompt that continues the last one runs only its new tokens.
        """
        context, count = self._context(prompt), _count(max_tokens, "max_tokens")
        sampling = _sampling(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
        stops = _stops(stop)
        run = lambda on_text: self._native.generate_text(context, count, sampling, stops, True, on_text)  # noqa: E731
        return _stream_text(run) if stream else run(None)[1]

    def generate_tokens(self, prompt: Union[str, Sequence[int]], max_tokens: int = 128, *,
                        stop_at_end: bool = True, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                        min_p: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                        seed: int = 0) -> list[int]:
        """As :meth:`generate`, the token ids picked (an end-of-text token included when it ends
        generation; with ``stop_at_end=False`` exactly ``max_tokens`` of them)."""
        context = self._context(prompt)
        sampling = _sampling(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
        tokens, _, _ = self._native.generate_text(context, _count(max_tokens, "max_tokens"), sampling, [],
                                                  bool(stop_at_end), None)
        return list(tokens)

    def chat(self, messages: Sequence[dict], max_tokens: int = 256, *, template: Optional[str] = None,
             temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
             repeat_penalty: float = 1.0, repeat_last_n: int = 64, seed: int = 0, stop: Sequence[str] = (),
             stream: bool = False) -> Union[str, Iterator[str]]:
        """The assistant's reply to a conversation: ``messages`` as ``{"role": "system" | "user" |
        "assistant", "content": text}`` in order, written in the file's chat template (or the family
        ``template`` names: "chatml", "llama3", "gemma", ...; a template qjit does not know is
        refused by name). Sampling and ``stream`` as :meth:`generate`; the reply ends at the
        template's end of turn. A conversation continued call after call reuses the KV cache."""
        if isinstance(messages, dict) or not all(isinstance(m, dict) for m in messages):
            raise InvalidArgumentError("messages: expected a list of {'role': ..., 'content': ...} dicts")
        pairs = []
        for i, message in enumerate(messages):
            if set(message) != {"role", "content"} or not all(isinstance(v, str) for v in message.values()):
                raise InvalidArgumentError(f"messages[{i}]: expected {{'role': str, 'content': str}}, got {message!r}")
            pairs.append((message["role"], _utf8(message["content"], f"messages[{i}]")))
        if not pairs:
            raise InvalidArgumentError("messages: empty; a conversation needs at least one message")
        text, template_stops = self._native.format_chat(pairs, "" if template is None else str(template))
        context, count = list(self._native.tokenize(text, True, True)), _count(max_tokens, "max_tokens")
        sampling = _sampling(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
        stops = list(template_stops) + _stops(stop)
        run = lambda on_text: self._native.generate_text(context, count, sampling, stops, True, on_text)  # noqa: E731
        return _stream_text(run) if stream else run(None)[1]

    def _context(self, prompt: Any) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidArgumentError("prompt: empty; generation starts after at least one token")
            return self.tokenize(prompt)
        tokens = _tokens(prompt, "prompt")
        if not tokens:
            raise InvalidArgumentError("prompt: empty; generation starts after at least one token")
        return tokens

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(**self._native.info())

    def __repr__(self) -> str:
        info = self.info
        return (f"qjit.Model({self.path!r}: {info.n_layers} layers, dim {info.dim}, vocabulary {info.vocab_size}, "
                f"{info.linears})")


def _utf8(text: str, what: str) -> str:
    """``text`` when it encodes to UTF-8 (lone surrogates do not), else InvalidArgumentError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidArgumentError(f"{what}: not valid text at character {error.start}: {error.reason}") from None
    return text


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidArgumentError(f"{what} is {value!r}; expected an integer >= 0")
    return int(value)


def _stops(stop: Any) -> list[str]:
    if isinstance(stop, str):
        stop = [stop]
    stops = list(stop)
    if not all(isinstance(s, str) and s for s in stops):
        raise InvalidArgumentError(f"stop: expected non-empty strings, got {stops!r}")
    return [_utf8(s, "stop") for s in stops]


def _sampling(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed) -> Any:
    """The native sampling options, checked against their ranges (the message names the option)."""
    options = _native.SamplingOptions()
    try:
        options.temperature, options.top_p, options.min_p = float(temperature), float(top_p), float(min_p)
        options.repeat_penalty = float(repeat_penalty)
        options.top_k, options.repeat_last_n = _count(top_k, "top_k"), _count(repeat_last_n, "repeat_last_n")
        options.seed = _count(seed, "seed")
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidArgumentError(f"a sampling option is not a number in range: {error}") from None
    _native.check_sampling(options)
    return options


class _Cancelled(Exception):
    """Raised into the native generation when a stream is closed early."""


def _stream_text(run) -> Iterator[str]:
    """Runs ``run(on_text)`` on a thread, yielding its text as it comes; closing the iterator stops it."""
    pieces: queue.Queue = queue.Queue()
    cancelled = threading.Event()
    finished = object()

    def on_text(piece: str) -> None:
        if cancelled.is_set():
            raise _Cancelled()
        pieces.put(piece)

    def work() -> None:
        try:
            run(on_text)
        except _Cancelled:
            pass
        except BaseException as error:  # handed to the consumer
            pieces.put(error)
        finally:
            pieces.put(finished)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        while True:
            item = pieces.get()
            if item is finished:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        cancelled.set()
        worker.join()


def _is_sequence_of_ints(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim == 1
    if hasattr(value, "dim") and callable(value.dim):  # a PyTorch tensor
        return value.dim() == 1
    return isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value)


def _tokens(value: Any, what: str) -> list[int]:
    """Token ids as a list of Python ints, from a list, a 1-D integer array or a 1-D tensor."""
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        array = np.asarray(value.cpu() if hasattr(value, "cpu") else value)
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise InvalidArgumentError(f"{what}: expected a 1-D integer array of token ids, "
                                       f"got shape {array.shape} of {array.dtype}")
        tokens = array.tolist()
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in value):
        tokens = [int(v) for v in value]
    else:
        raise InvalidArgumentError(f"{what}: expected a list of token ids (ints), got {type(value).__name__}")
    outside = next((t for t in tokens if not 0 <= t < 2**31), None)
    if outside is not None:
        raise InvalidArgumentError(f"{what}: token {outside} is not a token id (0 <= id < vocabulary size)")
    return tokens
