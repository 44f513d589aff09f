"""qjit.TpMlp and qjit.moe_forward: a tensor-parallel MLP's shards on one rank and on two ranks as
threads (a Python communicator), against numpy over the same quantized weights; grouped experts
against each expert's own forward; save and load; bad input and a failing communicator."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import qjit

K1, N1, N2 = 96, 256, 80


def silu(v):
    return v / (1.0 + np.exp(-v))


def gelu(v):
    return 0.5 * v * (1.0 + np.tanh(0.7978845608 * (v + 0.044715 * v ** 3)))


def mlp_weights(rng):
    return (rng.standard_normal((N1, K1), dtype=np.float32), rng.standard_normal((N1, K1), dtype=np.float32),
            rng.standard_normal((N2, N1), dtype=np.float32) * 0.1)


def reference(context, kind, up, gate, down, x):
    """The MLP in float64 over the weights as qjit quantizes them (each matrix whole, 4-bit g32)."""
    def dequantized(w):
        return qjit.Linear.quantize(context, w, bits=4, group_size=32).dequantize().astype(np.float64)
    x = x.astype(np.float64)
    hidden = silu(x @ dequantized(gate)) * (x @ dequantized(up)) if kind == "swiglu" else gelu(x @ dequantized(up))
    return hidden @ dequantized(down)


class ThreadComm:
    """The ranks of one process's threads: sums and gathers through shared buffers and a barrier."""

    def __init__(self, shared, rank, world_size):
        self.shared, self.rank, self.world_size = shared, rank, world_size

    def all_reduce_sum(self, buffer):
        self.shared["parts"][self.rank] = buffer.copy()
        self.shared["barrier"].wait()
        buffer[:] = np.sum(self.shared["parts"], axis=0)
        self.shared["barrier"].wait()

    def all_gather(self, send, receive):
        self.shared["parts"][self.rank] = send.copy()
        self.shared["barrier"].wait()
        receive[:] = np.concatenate(self.shared["parts"])
        self.shared["barrier"].wait()


@pytest.mark.parametrize("kind", ["swiglu", "gelu"])
@pytest.mark.parametrize("rows", [1, 5])
def test_one_rank_matches_numpy(exact_context, rng, kind, rows):
    up, gate, down = mlp_weights(rng)
    mlp = qjit.TpMlp.quantize(exact_context, up, down, gate=gate if kind == "swiglu" else None, kind=kind,
                              bits=4, group_size=32)
    info = mlp.info
    assert (info.kind, info.world_size, info.k1, info.n1, info.n2, info.shard_n1) == (kind, 1, K1, N1, N2, N1)
    x = rng.standard_normal((rows, K1), dtype=np.float32)
    np.testing.assert_allclose(mlp(x), reference(exact_context, kind, up, gate, down, x), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("algorithm", ["aware", "naive"])
def test_two_ranks_as_threads_equal_one(exact_context, rng, algorithm):
    up, gate, down = mlp_weights(rng)
    x = rng.standard_normal((3, K1), dtype=np.float32)
    whole = qjit.TpMlp.quantize(exact_context, up, down, gate=gate, bits=4, group_size=32)(x)
    shards = [qjit.TpMlp.quantize(exact_context, up, down, gate=gate, rank=r, world_size=2, algorithm=algorithm,
                                  bits=4, group_size=32) for r in range(2)]
    assert [s.info.shard_n1 for s in shards] == [N1 // 2] * 2
    assert shards[0].traffic(3)["all_reduces"] == 1
    shared = {"parts": [None, None], "barrier": threading.Barrier(2)}
    results = [None, None]

    def run(rank):
        results[rank] = shards[rank](x, ThreadComm(shared, rank, 2))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for y in results:
        np.testing.assert_allclose(y, whole, rtol=1e-4, atol=1e-3)


def test_a_failing_communicator_raises_its_exception(exact_context, rng):
    up, gate, down = mlp_weights(rng)
    mlp = qjit.TpMlp.quantize(exact_context, up, down, gate=gate, rank=0, world_size=2, bits=4, group_size=32)

    class Broken:
        rank, world_size = 0, 2

        def all_reduce_sum(self, buffer):
            raise ConnectionError("the peer went away")

        def all_gather(self, send, receive):
            raise ConnectionError("the peer went away")

    with pytest.raises(ConnectionError, match="peer went away"):
        mlp(np.ones((1, K1), dtype=np.float32), Broken())
    with pytest.raises(qjit.InvalidArgumentError):
        mlp(np.ones((1, K1), dtype=np.float32))  # world size 2 needs a communicator


def test_save_and_load_give_the_same_forward(exact_context, rng, tmp_path):
    up, gate, down = mlp_weights(rng)
    mlp = qjit.TpMlp.quantize(exact_context, up, down, gate=gate, bits=4, group_size=32)
    mlp.save(tmp_path / "mlp.qjittp")
    loaded = qjit.TpMlp.load(exact_context, tmp_path / "mlp.qjittp")
    x = rng.standard_normal((2, K1), dtype=np.float32)
    np.testing.assert_array_equal(loaded(x), mlp(x))


def test_bad_shapes_are_refused(exact_context, rng):
    up, gate, down = mlp_weights(rng)
    with pytest.raises(qjit.InvalidArgumentError, match="gate"):
        qjit.TpMlp.quantize(exact_context, up, down)
    with pytest.raises(qjit.InvalidArgumentError, match="down"):
        qjit.TpMlp.quantize(exact_context, up, down.T.copy(), gate=gate)
    mlp = qjit.TpMlp.quantize(exact_context, up, down, gate=gate)
    with pytest.raises(qjit.InvalidArgumentError, match="k1"):
        mlp(np.ones((1, K1 + 1), dtype=np.float32))


def test_moe_forward_sums_each_experts_rows(exact_context, rng):
    k, n, m = 64, 48, 6
    experts = [qjit.Linear.quantize(exact_context, rng.standard_normal((n, k), dtype=np.float32), bits=4,
                                    group_size=32) for _ in range(3)]
    x = rng.standard_normal((m, k), dtype=np.float32)
    routing = [(np.array([0, 2, 5]), np.array([0.5, 0.25, 1.0], dtype=np.float32)),
               (np.array([2, 3]), None),
               (np.array([], dtype=np.int32), None)]
    y = qjit.moe_forward(exact_context, [(e, rows, w) for e, (rows, w) in zip(experts, routing)], x)
    expected = np.zeros((m, n))
    for expert, (rows, weights) in zip(experts, routing):
        scale = np.ones(len(rows)) if weights is None else weights
        expected[rows] += scale[:, None] * expert(x[rows])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4)  # token 1 and 4: no expert, zeros
    with pytest.raises(qjit.InvalidArgumentError, match="weights"):
        qjit.moe_forward(exact_context, [(experts[0], [0, 1], np.ones(3, dtype=np.float32))], x)
    with pytest.raises(qjit.InvalidArgumentError):
        qjit.moe_forward(exact_context, [(experts[0], [m], None)], x)
