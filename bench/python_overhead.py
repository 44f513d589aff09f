#!/usr/bin/env python3
"""What a Python forward costs over the same forward in C: one qjit layer (K = N = 256, 4-bit,
group 128, batch 1), called from Python on numpy arrays and PyTorch tensors (with and without
out=), and timed in C by qjit_linear_benchmark (back-to-back calls, each timed, median), in
interleaved rounds of the same run. Needs the installed package (pip install .).

    python3 bench/python_overhead.py [--calls 20000] [--rounds 7] [--k 256] [--n 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import qjit


def median_call_us(call, calls: int) -> float:
    """Median wall time of one call, each timed on its own (as the C benchmark times them)."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(calls):
        start = clock()
        call()
        samples.append(clock() - start)
    return statistics.median(samples) * 1e-3


def timer_cost_us(calls: int) -> float:
    """What timing an empty Python call costs, to subtract from the Python figures."""
    return median_call_us(lambda: None, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per timing")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds; the table shows their medians")
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--n", type=int, default=256)
    args = parser.parse_args()

    context = qjit.Context(tuning_db="")
    rng = np.random.default_rng(0)
    layer = qjit.Linear.quantize(context, rng.standard_normal((args.n, args.k), dtype=np.float32), bits=4,
                                 group_size=128)
    x = rng.standard_normal((1, args.k), dtype=np.float32)
    out = np.empty((1, args.n), np.float32)
    variants = {"numpy": lambda: layer(x), "numpy, out=": lambda: layer(x, out=out)}
    try:
        import torch

        xt, outt = torch.from_numpy(x.copy()), torch.empty(1, args.n)
        variants["torch"] = lambda: layer(xt)
        variants["torch, out="] = lambda: layer(xt, out=outt)
    except ImportError:
        pass

    for call in variants.values():  # warm up
        median_call_us(call, 1000)
    c_us, empty_us = [], []
    python_us = {name: [] for name in variants}
    for _ in range(args.rounds):
        c_us.append(layer.benchmark(m=1, repeats=args.calls, cold=False))
        empty_us.append(timer_cost_us(args.calls))
        for name, call in variants.items():
            python_us[name].append(median_call_us(call, args.calls))

    c = statistics.median(c_us)
    empty = statistics.median(empty_us)
    print(f"qjit {qjit.__version__}: {context.describe()}")
    print(f"layer: {layer.describe()}")
    print(f"{args.rounds} interleaved rounds of {args.calls} calls; medians of the rounds' medians; "
          f"an empty timed Python call costs {empty:.3f} us and is subtracted\n")
    print("| call | us per call | over C |")
    print("|---|---|---|")
    print(f"| C, qjit_linear_benchmark (cold=0) | {c:.3f} | - |")
    for name, samples in python_us.items():
        python = statistics.median(samples) - empty
        print(f"| Python, {name} | {python:.3f} | {python - c:+.3f} us |")


if __name__ == "__main__":
    main()
