"""qjit.tune: fills the tuning database ahead of time, as qjit-tune does.

``qjit.tune(...)`` runs qjit-tune's driver (the library function the tool runs) in this process
with the matching flags and returns its table as TuneRow records; ``python -m qjit.tune`` and the
``qjit-tune`` console command run the bundled tool with their arguments unchanged. See
docs/tuning.md for what the tool measures.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from . import _native
from .context import ACTIVATIONS, CUDA_DTYPES, choice
from .errors import Error, FileIOError, InvalidArgumentError

_PACKAGE = Path(__file__).resolve().parent
_TOOL = _PACKAGE / "bin" / "qjit-tune"
_MODELS = _PACKAGE / "models"
_BITS = (2, 3, 4, 8)
_GROUP_SIZES = (16, 32, 64, 128, 256, -1)
_MAX_BATCH = 1 << 20


@dataclasses.dataclass(frozen=True)
class TuneRow:
    """One row of qjit-tune's table: a distinct layer shape at one batch, as tuned and timed."""

    layer: str  #: the model's layer names of this shape, e.g. "q_proj,k_proj"
    k: int
    n: int
    batch: int  #: activation rows per call the tiling is tuned for
    source: str  #: where the tiling came from: "hit" (database), "tuned", "same", "model", "forced", "portable"
    kernel: str  #: e.g. "q4g128_asym_gemm_i8_avx512vnni_inline"
    tiling: str  #: e.g. "tu=4,mb=6,prefetch=8,ku=2,ksplit=1"
    tuning_ms: float  #: time spent choosing the tiling
    us: float  #: median cold call, microseconds
    gbps: float  #: weight bytes read per second at that speed, GB/s
    x_probe: float  #: gbps over the memory read probe's (TuneResult.probe_gbps)
    default_us: Optional[float]  #: the untuned default (the model's pick); None with compare=False
    portable_us: Optional[float]  #: the portable path; None with compare=False
    cuda_source: Optional[str] = None  #: the CUDA fields are set when cuda_device is given
    cuda_tiling: Optional[str] = None
    cuda_tuning_ms: Optional[float] = None
    cuda_us: Optional[float] = None
    cuda_gbps: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """A qjit-tune run: the machine, the rows of its table and the text it printed."""

    machine: str  #: the context's description: CPU, ISA in use, caches, tuning database
    threads: int
    probe_gbps: float  #: the memory read probe the x_probe ratios are against
    rows: list[TuneRow]
    text: str  #: the tool's standard output, table included


def tune(model: Optional[str | os.PathLike] = None, checkpoint: Optional[str | os.PathLike] = None, *,
         bits: int = 4, group_size: int = 128, symmetric: bool = False, batches: Sequence[int] = (1, 16),
         threads: int = 0, budget_ms: Optional[float] = None, exhaustive: bool = False, retune: bool = False,
         compare: bool = True, repeats: int = 15, activations: str = "auto",
         tuning_db: Optional[str | os.PathLike] = None, cuda_device: Optional[int] = None, cuda_dtype: str = "f16",
         quiet: bool = False) -> TuneResult:
    """Tunes layer shapes on this machine, stores the choices in the tuning database, times them.

    Runs qjit-tune's driver (so it behaves exactly like the tool) in this process, with the GIL
    released while it tunes and times. Its output goes to sys.stdout piece by piece unless
    ``quiet``; its warnings to sys.stderr at the end unless ``quiet``.

    Args:
        model: a model config (a YAML file, see configs/models) or the name of a bundled one,
            e.g. "llama-2-70b" or "stories260K"; None for Llama-2-7B. Its layers get random
            weights: speed does not depend on their values.
        checkpoint: a GPTQ checkpoint directory: tune each distinct format and shape of its
            layers instead (width, group and symmetry come from it; not with model).
        bits: weight width, 2, 3, 4 or 8.
        group_size: rows of K per scale, 16, 32, 64, 128, 256 or -1 (per column).
        symmetric: zero point fixed at 2^(bits-1).
        batches: the activation rows per call to tune for (one or more).
        threads: worker threads; 0 for one per available core.
        budget_ms: milliseconds of timing per shape; None for the default (300), 0 for the
            performance model's pick, untimed.
        exhaustive: time every tiling the registers allow (no pruning, no budget).
        retune: tune shapes the database already holds.
        compare: also time the untuned default and the portable path.
        repeats: cold calls per timing (the median is reported).
        activations: "auto", "f32" (exact) or "int8".
        tuning_db: the database file; None for the default ($QJIT_TUNING_DB, else
            ~/.cache/qjit/tuning.yaml).
        cuda_device: also tune the CUDA kernels of this device ordinal.
        cuda_dtype: the CUDA activation type, "f16" or "bf16".
        quiet: print nothing; the output is still in TuneResult.text.

    Raises:
        InvalidArgumentError: a bad argument (checked before the tool runs).
        FileIOError: a model file or checkpoint directory that does not exist.
        Error: the run failed; the subclass matches the status it reports.
    """
    flags = _model_flags(model, checkpoint, bits, group_size, symmetric)
    batches = [batches] if _is_int(batches) else list(batches)
    _require(len(batches) > 0 and all(_is_int(b) and 1 <= b <= _MAX_BATCH for b in batches),
             f"batches is {batches!r}; expected one or more integers from 1 to {_MAX_BATCH}")
    _require(_is_int(threads) and threads >= 0, f"threads is {threads!r}; expected an integer >= 0 (0: all cores)")
    _require(budget_ms is None or (isinstance(budget_ms, numbers.Real) and budget_ms >= 0),
             f"budget_ms is {budget_ms!r}; expected a number >= 0 or None")
    _require(_is_int(repeats) and 1 <= repeats <= 100000,
             f"repeats is {repeats!r}; expected an integer from 1 to 100000")
    choice(ACTIVATIONS, activations, "activations")
    choice(CUDA_DTYPES, cuda_dtype, "cuda_dtype")
    _require(cuda_device is None or (_is_int(cuda_device) and cuda_device >= 0),
             f"cuda_device is {cuda_device!r}; expected a device ordinal >= 0 or None")

    flags += ["--batch", *map(str, batches), "--threads", str(threads), "--repeats", str(repeats),
              "--activations", activations]
    if budget_ms is not None:
        flags += ["--budget", str(budget_ms)]
    flags += [flag for flag, on in (("--exhaustive", exhaustive), ("--retune", retune), ("--no-compare", not compare))
              if on]
    if tuning_db is not None:
        flags += ["--db", os.fspath(tuning_db)]
    if cuda_device is not None:
        flags += ["--cuda-device", str(cuda_device), "--cuda-dtype", cuda_dtype]

    with tempfile.TemporaryDirectory(prefix="qjit-tune-") as scratch:
        report_path = os.path.join(scratch, "run.json")
        text = _run(flags + ["--json", report_path], quiet)
        with open(report_path, encoding="utf-8") as report_file:
            report = json.load(report_file)
    return TuneResult(machine=report["machine"], threads=report["threads"], probe_gbps=report["probe_gbps"],
                      rows=[TuneRow(**row) for row in report["rows"]], text=text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The qjit-tune command (also ``python -m qjit.tune``): the bundled tool with these arguments.

    Returns its exit status (128 + the signal's number when a signal ended it).
    """
    arguments = sys.argv[1:] if argv is None else list(argv)
    try:
        status = subprocess.call(["qjit-tune", *arguments], executable=_tool())
    except KeyboardInterrupt:  # the tool got the same SIGINT and has stopped
        return 128 + signal.SIGINT
    return status if status >= 0 else 128 - status


def bundled_models() -> list[str]:
    """The names of the model configs installed with the package (qjit/models/NAME.yaml)."""
    return sorted(path.stem for path in _MODELS.glob("*.yaml"))


def _model_flags(model: Optional[str | os.PathLike], checkpoint: Optional[str | os.PathLike], bits: int,
                 group_size: int, symmetric: bool) -> list[str]:
    """The flags that say which layers to tune: a checkpoint's, or a model's at this width and group."""
    if checkpoint is not None:
        _require(model is None, "model and checkpoint exclude each other: a checkpoint has its own layers")
        _require((bits, group_size, bool(symmetric)) == (4, 128, False),
                 "bits, group_size and symmetric come from the checkpoint; leave them at their defaults")
        if not os.path.isdir(checkpoint):
            raise FileIOError(f"checkpoint: no directory at {os.fspath(checkpoint)!r}")
        return ["--checkpoint", os.fspath(checkpoint)]
    _require(_is_int(bits) and bits in _BITS, f"bits is {bits!r}; expected one of {', '.join(map(str, _BITS))}")
    _require(_is_int(group_size) and group_size in _GROUP_SIZES,
             f"group_size is {group_size!r}; expected one of {', '.join(map(str, _GROUP_SIZES))}")
    flags = ["--bits", str(bits), "--group", str(group_size)] + (["--symmetric"] if symmetric else [])
    return flags if model is None else ["--model", _model_path(model)] + flags


def _model_path(model: str | os.PathLike) -> str:
    """A model config's file: a path as given, or a bare name's bundled config."""
    if isinstance(model, str) and os.sep not in model and not model.endswith((".yaml", ".yml")):
        bundled = _MODELS / f"{model}.yaml"
        if not bundled.is_file():
            raise InvalidArgumentError(f"model {model!r} is not a file nor a bundled model; bundled: "
                                       f"{', '.join(bundled_models())}")
        return str(bundled)
    _require(isinstance(model, (str, os.PathLike)), f"model is {model!r}; expected a YAML file or a bundled name")
    if not os.path.isfile(model):
        raise FileIOError(f"model: no file at {os.fspath(model)!r}")
    return os.fspath(model)


def _run(flags: list[str], quiet: bool) -> str:
    """Runs the driver; returns its standard output or raises the Error of the status it failed with."""
    output = []

    def write(text: str) -> None:
        output.append(text)
        if not quiet:
            sys.stdout.write(text)
            sys.stdout.flush()

    warnings = _native.tune(flags, write)
    if warnings and not quiet:
        sys.stderr.write(warnings)
    return "".join(output)


def _tool() -> str:
    if not os.access(_TOOL, os.X_OK):
        raise Error(f"qjit-tune is missing from the package ({_TOOL}); reinstall qjit")
    return str(_TOOL)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidArgumentError(message)


if __name__ == "__main__":
    sys.exit(main())
