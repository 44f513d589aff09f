"""Tensor-parallel MLPs and grouped experts.

``TpMlp`` is one rank's shards of an MLP split Megatron-style (docs/tensor-parallel.md); its
forward sums the ranks' partial outputs through a communicator the caller supplies: any object with ``rank``,
``world_size``, ``all_reduce_sum(buffer)`` (in place, float32) and ``all_gather(send, receive)``
(receive holds world_size x send, rank r's at r * len(send)). mpi4py wraps in four lines:

    class MpiComm:
        def __init__(self, comm): self.comm, self.rank, self.world_size = comm, comm.rank, comm.size
        def all_reduce_sum(self, buffer): self.comm.Allreduce(MPI.IN_PLACE, buffer)
        def all_gather(self, send, receive): self.comm.Allgather(send, receive)

With world_size 1 no communicator is needed. ``moe_forward`` runs a mixture-of-experts layer's
experts, each on the token rows routed to it, in one call.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _native
from .context import choice
from .linear import Linear, quant_config

KINDS = {"swiglu": 0, "gelu": 1}
ALGORITHMS = {"naive": 0, "aware": 1}


@dataclasses.dataclass(frozen=True)
class TpMlpInfo:
    """A rank's shards (qjit_tp_mlp_info)."""

    kind: str  #: "swiglu" or "gelu"
    algorithm: str  #: "naive" or "aware"
    rank: int
    world_size: int
    k1: int  #: model width
    n1: int  #: intermediate width
    n2: int  #: outputs
    shard_n1: int  #: intermediate columns this rank holds
    act_order: bool
    weight_bytes: int  #: the bytes this rank's forward streams


class TpMlp:
    """One rank's shards of an MLP: SwiGLU ``(silu(x Wg) * (x Wu)) Wd`` or GELU ``gelu(x Wu) Wd``."""

    def __init__(self, native: Any, context: Any) -> None:
        self._native = native
        self.context = context

    @classmethod
    def quantize(cls, context: Any, up: Any, down: Any, gate: Any = None, *, kind: str = "swiglu", rank: int = 0,
                 world_size: int = 1, algorithm: str = "aware", bits: int = 4, group_size: int = 128,
                 symmetric: bool = False, method: str = "rtn", scale_dtype: str = "f16", **options: Any) -> "TpMlp":
        """Quantizes float32 weights in nn.Linear layout (up and gate (n1, k1), down (n2, n1)) whole,
        then keeps rank ``rank``'s shards. Methods without calibration (rtn, hqq, milo)."""
        config = quant_config("TpMlp.quantize", bits, group_size, symmetric, method, scale_dtype, options)
        native = _native.TpMlp.quantize(context._native, choice(KINDS, kind, "kind"), up, gate, down, config,
                                        int(rank), int(world_size), choice(ALGORITHMS, algorithm, "algorithm"))
        return cls(native, context)

    @classmethod
    def load(cls, context: Any, path: str | os.PathLike) -> "TpMlp":
        """Shards saved by :meth:`save` (or qjit_tp_mlp_save), on this context."""
        return cls(_native.TpMlp.load(context._native, os.fspath(path)), context)

    def save(self, path: str | os.PathLike) -> None:
        self._native.save(os.fspath(path))

    def forward(self, x: Any, comm: Any = None) -> Any:
        """The MLP of x (..., k1), summed over the ranks through ``comm`` (None for world size 1).

        Every rank passes the same x and gets the whole y (..., n2). An exception the communicator
        raises propagates once the forward has returned."""
        return self._native.forward(x, comm)

    __call__ = forward

    @property
    def info(self) -> TpMlpInfo:
        record = self._native.info()
        kinds = {value: name for name, value in KINDS.items()}
        algorithms = {value: name for name, value in ALGORITHMS.items()}
        return TpMlpInfo(**{**record, "kind": kinds[record["kind"]], "algorithm": algorithms[record["algorithm"]]})

    def traffic(self, m: int) -> dict:
        """What one forward of m rows moves between ranks (collectives, bytes, ring accounting)."""
        return self._native.traffic(int(m))


def moe_forward(context: Any, experts: Sequence[Tuple[Linear, Any, Optional[Any]]], x: Any) -> Any:
    """A mixture-of-experts layer in one call: ``y[t] = sum of weight * (x[t] W_e)`` over the experts
    e whose rows name token t.

    Args:
        experts: (layer, rows, weights) per expert: rows are int32 token indices into x's rows
            (each at most once per expert), weights float32 gate weights per row or None for 1.
            Every layer has the same K and N.
        x: (..., K) float32; a token no expert takes gets zeros.
    """
    triples = []
    for layer, rows, weights in experts:
        triples.append((layer._native, np.ascontiguousarray(rows, dtype=np.int32),
                        None if weights is None else np.ascontiguousarray(weights, dtype=np.float32)))
    return _native.moe_forward(context._native, triples, x)
