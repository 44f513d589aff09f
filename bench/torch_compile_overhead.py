#!/usr/bin/env python3
"""What QuantLinear costs over the C call, eagerly and inside a torch.compile graph, and what the
registration route costs: qjit's operator (torch.library.Library, output allocated by Inductor)
against the same implementation registered with torch.library.custom_op (returning a new tensor),
in interleaved rounds of one run. One qjit layer (K = N = 256, 4-bit, group 128, batch 1) is
chained L times; a compiled chain's cost per layer is (t(L = 9) - t(L = 1)) / 8, which leaves out
what the compiled graph costs whatever it holds. Needs the installed package and PyTorch.

    python3 bench/torch_compile_overhead.py [--calls 5000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from torch import nn

import qjit
import qjit.torch as qtorch
from qjit.torch import ops


@torch.library.custom_op("qjit_bench::linear", mutates_args=())
def custom_op_linear(x: torch.Tensor, layer: int, out_features: int) -> torch.Tensor:
    y = torch.empty(x.shape[:-1] + (out_features,), dtype=x.dtype)
    ops._linear_out_cpu(x, layer, y)
    return y


@custom_op_linear.register_fake
def _(x: torch.Tensor, layer: int, out_features: int) -> torch.Tensor:
    return x.new_empty(x.shape[:-1] + (out_features,))


_floor = torch.library.Library("qjit_bench", "FRAGMENT")
_floor.define("identity(Tensor x) -> Tensor")
_floor.impl("identity", lambda x: x, "CPU")  # what reaching any Python implementation costs


class CustomOpLinear(nn.Module):
    """QuantLinear's forward through the custom_op route instead."""

    def __init__(self, module: qtorch.QuantLinear) -> None:
        super().__init__()
        self.number, self.out_features = module._number, module.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return custom_op_linear(x, self.number, self.out_features)


def per_call_us(call, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)

    context = qjit.Context(tuning_db="", threads=1)
    layer = qjit.Linear.quantize(context, np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32),
                                 bits=4, group_size=128)
    modules = [qtorch.QuantLinear(layer) for _ in range(9)]
    chains = {
        "qjit operator (Library)": {n: nn.Sequential(*modules[:n]) for n in (1, 9)},
        "custom_op": {n: nn.Sequential(*map(CustomOpLinear, modules[:n])) for n in (1, 9)},
    }
    x = torch.randn(1, 256)
    identity = torch.ops.qjit_bench.identity.default
    timings = {"C call": lambda: layer.benchmark(m=1, repeats=args.calls),
               "eager QuantLinear": lambda: per_call_us(lambda: modules[0](x), args.calls),
               "identity operator": lambda: per_call_us(lambda: identity(x), args.calls)}
    with torch.no_grad():
        for route, by_length in chains.items():
            compiled = {n: torch.compile(chain, fullgraph=True) for n, chain in by_length.items()}
            for n, fn in compiled.items():
                fn(x)  # compiles
                timings[f"{route}, compiled chain of {n}"] = lambda fn=fn: per_call_us(lambda: fn(x), args.calls)
        samples = {name: [] for name in timings}
        for _ in range(args.rounds):
            for name, timing in timings.items():
                samples[name].append(timing())
    us = {name: statistics.median(values) for name, values in samples.items()}
    c = us["C call"]
    print(f"qjit {qjit.__version__}, torch {torch.__version__}: {context.describe()}")
    print(f"layer: {layer.describe()}; {args.rounds} interleaved rounds of {args.calls} calls, medians\n")
    print("| what | us | per layer over the C call |")
    print("|---|---|---|")
    print(f"| C call (qjit_linear_benchmark) | {c:.2f} | - |")
    print(f"| eager QuantLinear, no grad | {us['eager QuantLinear']:.2f} | {us['eager QuantLinear'] - c:+.2f} us |")
    print(f"| an operator whose Python implementation returns its input, called eagerly | "
          f"{us['identity operator']:.2f} | (the dispatcher's floor) |")
    for route in chains:
        one, nine = us[f"{route}, compiled chain of 1"], us[f"{route}, compiled chain of 9"]
        per_layer = (nine - one) / 8
        print(f"| {route}: compiled chain of 1 / of 9 | {one:.2f} / {nine:.2f} | {per_layer - c:+.2f} us |")


if __name__ == "__main__":
    main()
