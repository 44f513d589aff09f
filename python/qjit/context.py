"""qjit.Context: the CPU (and optionally CUDA device) that layers run on, and its tuning database."""

from __future__ import annotations

import os
from typing import Optional

from . import _native
from .errors import InvalidArgumentError

ISAS = {"auto": 0, "portable": 1, "avx2": 2, "avx2_vnni": 3, "avx512": 4, "avx512_vnni": 5}
ACTIVATIONS = {"auto": 0, "f32": 1, "int8": 2}
TUNING_MODES = {"default": 0, "retune": 1, "exhaustive": 2}
CUDA_DTYPES = {"f16": 1, "bf16": 2}


def choice(table: dict, value: str, what: str) -> int:
    """The C enum value of a name, or an InvalidArgumentError listing the names."""
    try:
        return table[value]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"{what} is {value!r}; expected one of {', '.join(map(repr, table))}") from None


class Context:
    """Where layers run: a thread pool, the instruction set, the tuning database, a CUDA device.

    A context lives as long as any layer or checkpoint made with it, so it can never be freed
    under them. Every method may be called from several threads at once (see ``qjit.h``).

    Args:
        threads: worker threads; 0 means one per available core.
        max_isa: cap on the instruction set: "auto" (the best the CPU has), "portable",
            "avx2", "avx2_vnni", "avx512" or "avx512_vnni".
        activations: "auto", "f32" (exact) or "int8" (activations quantized per group).
        tuning_db: the tuning database file; None for the default
            ($QJIT_TUNING_DB, else ~/.cache/qjit/tuning.yaml), "" for none (tune in memory).
        tuning_budget_ms: milliseconds a layer creation may spend timing tilings when the
            database has no record; None for the default (300), 0 for the model's pick, untimed.
        tuning_mode: "default", "retune" (search even on a database hit) or "exhaustive".
        tuning_batch: activation rows per forward the tiling is tuned for (1: decoding).
        tiling: one tiling for every layer, e.g. "tu=4,mb=4"; None to tune per layer.
        cuda_device: a CUDA device ordinal; layers then also upload their weights to it.
        cuda_dtype: the activation type CUDA kernels are built for, "f16" or "bf16".
        verbose: print one line per layer creation on stderr.
    """

    def __init__(self, threads: int = 0, max_isa: str = "auto", activations: str = "auto",
                 tuning_db: Optional[str | os.PathLike] = None, tuning_budget_ms: Optional[float] = None,
                 tuning_mode: str = "default", tuning_batch: int = 1, tiling: Optional[str] = None,
                 cuda_device: Optional[int] = None, cuda_dtype: str = "f16", verbose: bool = False) -> None:
        self._native = _native.Context(
            threads=int(threads),
            max_isa=choice(ISAS, max_isa, "max_isa"),
            activations=choice(ACTIVATIONS, activations, "activations"),
            tuning_db=None if tuning_db is None else os.fspath(tuning_db),
            tuning_budget_ms=-1.0 if tuning_budget_ms is None else float(tuning_budget_ms),
            tuning_mode=choice(TUNING_MODES, tuning_mode, "tuning_mode"),
            tuning_batch=int(tuning_batch),
            tiling=tiling,
            cuda_device=-1 if cuda_device is None else int(cuda_device),
            cuda_dtype=choice(CUDA_DTYPES, cuda_dtype, "cuda_dtype"),
            verbosity=1 if verbose else 0,
        )
        self.cuda_device = cuda_device

    @property
    def threads(self) -> int:
        """The number of threads the context's layers use."""
        return self._native.num_threads()

    def describe(self) -> str:
        """One line: the CPU, the instruction set in use, caches, and the tuning database path."""
        return self._native.describe()

    def tuning_records(self) -> str:
        """A table of every tuning database record, this machine's marked with '*'."""
        return self._native.tuning_db_list()

    def export_tuning(self, path: str | os.PathLike) -> None:
        """Writes every tuning record to ``path`` (replaced atomically)."""
        self._native.tuning_db_export(os.fspath(path))

    def import_tuning(self, path: str | os.PathLike) -> None:
        """Merges the records of the database file at ``path`` into the context's (theirs win)."""
        self._native.tuning_db_import(os.fspath(path))

    def __repr__(self) -> str:
        return f"qjit.Context({self.describe()})"
