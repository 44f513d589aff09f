#!/usr/bin/env python3
"""PyTorch peers of bench_cuda, timed with bench_cuda's protocol on the same GPU.

For each Llama shape and batch: torch.matmul on dense 16-bit weights (cuBLAS) and PyTorch's own
4-bit group-128 kernel, torch.ops.aten._weight_int4pack_mm (bf16 activations, as that kernel
requires). Each call is preceded by an L2 flush (a memset of twice the L2, outside the events);
the median of --reps calls after 5 warm-ups is reported in microseconds.

    python3 bench/peer_torch.py [--shapes llama7b,llama70b] [--batches 1,2,4,...] [--reps 50]

Tooling only: run on the GPU machine next to bench_cuda; qjit itself never needs Python.
"""
import argparse
import statistics
import sys

import torch

SHAPES = {
    "llama7b": [("qkv/o", 4096, 4096), ("gate/up", 4096, 11008), ("down", 11008, 4096)],
    "llama70b": [("q/o", 8192, 8192), ("k/v", 8192, 1024), ("gate/up", 8192, 28672), ("down", 28672, 8192)],
}
GROUP = 128
WARMUP = 5


def cold_median_us(fn, reps, flush):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for call in range(WARMUP + reps):
        flush.fill_(call & 0xFF)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if call >= WARMUP:
            times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def int4pack_layer(k, n):
    """Random 4-bit codes, scales and zeros in _weight_int4pack_mm's layout, or the reason it fails."""
    codes = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
    packed_bytes = ((codes[:, ::2] << 4) | codes[:, 1::2]).to(torch.uint8)
    inner_k_tiles = 8 if k % (8 * 16) == 0 else 2
    weight = torch.ops.aten._convert_weight_to_int4pack(packed_bytes, inner_k_tiles)
    scales = torch.rand(k // GROUP, n, device="cuda") * 0.01 + 0.001
    zeros = torch.rand(k // GROUP, n, device="cuda") * 0.1
    scale_and_zero = torch.stack([scales, zeros], dim=2).to(torch.bfloat16).contiguous()
    return weight, scale_and_zero


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="llama7b,llama70b")
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if not torch.cuda.is_available():
        print("no CUDA device seen by PyTorch")
        return 0
    properties = torch.cuda.get_device_properties(0)
    print(f"PyTorch {torch.__version__}, {properties.name}; median of {args.reps} calls, L2 flushed before each")
    flush = torch.empty(2 * properties.L2_cache_size, dtype=torch.uint8, device="cuda")
    has_int4 = hasattr(torch.ops.aten, "_weight_int4pack_mm")
    print("\n| shape | m | torch fp16 matmul us | torch bf16 matmul us | torch int4pack_mm (bf16, q4g128) us |")
    print("|---|---|---|---|---|")
    for model in args.shapes.split(","):
        for role, k, n in SHAPES[model]:
            w16 = torch.randn(k, n, device="cuda", dtype=torch.float16) * 0.02
            wb16 = w16.to(torch.bfloat16)
            int4, int4_error = None, ""
            if has_int4:
                try:
                    int4 = int4pack_layer(k, n)
                except Exception as error:  # a PyTorch without this kernel for the GPU: say why
                    int4_error = f"unavailable: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
            else:
                int4_error = "unavailable: no torch.ops.aten._weight_int4pack_mm"
            for m in batches:
                x16 = torch.randn(m, k, device="cuda", dtype=torch.float16)
                xb16 = x16.to(torch.bfloat16)
                fp16_us = cold_median_us(lambda: torch.matmul(x16, w16), args.reps, flush)
                bf16_us = cold_median_us(lambda: torch.matmul(xb16, wb16), args.reps, flush)
                int4_text = int4_error
                if int4 is not None:
                    weight, scale_and_zero = int4
                    int4_us = cold_median_us(
                        lambda: torch.ops.aten._weight_int4pack_mm(xb16, weight, GROUP, scale_and_zero),
                        args.reps, flush)
                    int4_text = f"{int4_us:.1f}"
                print(f"| {model} {k}x{n} ({role}) | {m} | {fp16_us:.1f} | {bf16_us:.1f} | {int4_text} |")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
