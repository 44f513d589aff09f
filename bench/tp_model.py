#!/usr/bin/env python3
"""A performance model of a tensor-parallel MLP forward: naive against TP-aware.

    naive = compute + all-gather(m x N1) + permute + all-reduce(m x N2)
    aware = compute + all-reduce(m x N2)

Each collective is alpha + bytes / beta with ring accounting on a world of w ranks: an all-gather
of B bytes (all ranks' parts together) costs (w - 1) alpha + (w - 1) / w * B / beta, an all-reduce
of B bytes 2 (w - 1) alpha + 2 (w - 1) / w * B / beta. The permutation (naive only) reads and
writes the rank's m x N1 / w chunk of the gathered activations at memory bandwidth, as qjit does
(runtime/tp_mlp.cpp); the paper's Algorithm 2 permutes all m x N1, which on a GPU costs as little.

Compute is the same in both and bandwidth-bound: the rank's weights read once per forward. Two
settings:
  h100:     the paper's. A rank's share of the 4-bit g128 weights (codes plus an fp16 scale and a
            4-bit zero point per 128 weights) read at the HBM bandwidth times --hbm-efficiency;
            fp16 activations.
  measured: this machine. Compute at TP=w is the TP=1 forward bench_tp_mlp measured at that batch,
            divided by w (as if each rank had its own memory, as separate devices do); fp32
            activations; the permutation at the rate bench_tp_mlp's TP=1 naive rows measured.

The model leaves out kernel launch overheads (the naive algorithm's extra permutation kernel and
its extra collective each cost one launch or more on a GPU), synchronization and stragglers
(a collective waits for the slowest rank), the overlap of communication with compute, and
collective algorithms other than the ring (NCCL's tree and low-latency protocols cut the latency
term of small messages).

    bench/tp_model.py                                      the h100 setting
    bench/tp_model.py --measured bench/results/tp-2026-11-24/bench_tp_mlp.md
"""
import argparse
import re
import sys

GB = 1e9

# The paper's MLPs: (name, K1, N1, N2, weight matrices: SwiGLU has up, gate and down).
MLPS = [("llama-70b", 8192, 28672, 8192, 3), ("granite-20b", 6144, 24576, 6144, 2)]
BATCHES = [1, 2, 4, 8, 16]
WORLDS = [2, 4, 8]

# Interconnects: (name, beta in bytes/s per direction per rank, alpha in seconds per ring step).
INTERCONNECTS = [
    ("NVLink 4", 450 * GB, 3e-6),    # NVLink 4: ~450 GB/s per direction per GPU; a few us
    ("InfiniBand NDR", 50 * GB, 4e-6),    # 400 Gb/s: ~50 GB/s; 2-5 us
    ("100 GbE", 12 * GB, 15e-6),          # ~12 GB/s; 10-20 us
]

BITS = 4
GROUP = 128
HBM_BYTES_PER_S = 3.35e12  # H100 SXM HBM3
# The paper's measured TP-aware speedups over naive, Llama-70B MLP on H100 over NVLink.
PAPER_H100 = {2: 1.11, 8: 1.76}


def weight_bytes(k, n):
    """A 4-bit g128 GPTQ matrix: the codes, an fp16 scale and a 4-bit zero point per group and column."""
    return k * n * BITS / 8 + (k // GROUP) * n * (2 + BITS / 8)


def all_gather_s(total_bytes, w, beta, alpha):
    return (w - 1) * alpha + (w - 1) / w * total_bytes / beta


def all_reduce_s(total_bytes, w, beta, alpha):
    return 2 * (w - 1) * alpha + 2 * (w - 1) / w * total_bytes / beta


def predict(compute_s, m, n1, n2, w, activation_bytes, permute_bytes_per_s, beta, alpha):
    """(naive seconds, aware seconds) of one forward."""
    reduce = all_reduce_s(m * n2 * activation_bytes, w, beta, alpha)
    gather = all_gather_s(m * n1 * activation_bytes, w, beta, alpha)
    permute = 2 * m * n1 / w * activation_bytes / permute_bytes_per_s
    return compute_s + gather + permute + reduce, compute_s + reduce


def read_measured(path):
    """From bench_tp_mlp's output: {mlp: {m: (TP=1 aware us, TP=1 naive permute us)}}."""
    rows = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 8 or cells[1] != "1" or not re.fullmatch(r"\d+", cells[2]):
            continue
        permute_us = float(cells[6].split("+")[1])
        rows.setdefault(cells[0], {})[int(cells[2])] = (float(cells[4]), permute_us)
    if not rows:
        sys.exit(f"tp_model.py: no TP=1 rows in {path}")
    return rows


def table(setting, compute_s_of, activation_bytes, permute_rate_of):
    """Prints one table per interconnect; returns {(interconnect, mlp, w, m): ratio}."""
    ratios = {}
    for link, beta, alpha in INTERCONNECTS:
        print(f"\n### {setting}: {link}, beta {beta / GB:.0f} GB/s, alpha {alpha * 1e6:.0f} us\n")
        header = " | ".join(f"TP={w} naive us | TP={w} aware us | TP={w} ratio" for w in WORLDS)
        print(f"| MLP | m | {header} |")
        print("|---|---|" + "---|" * (3 * len(WORLDS)))
        for name, k1, n1, n2, _ in MLPS:
            for m in BATCHES:
                cells = []
                for w in WORLDS:
                    compute = compute_s_of(name, m, w)
                    if compute is None:
                        cells.append("- | - | -")
                        continue
                    naive, aware = predict(compute, m, n1, n2, w, activation_bytes, permute_rate_of(name, m), beta, alpha)
                    ratios[(link, name, w, m)] = naive / aware
                    cells.append(f"{naive * 1e6:.1f} | {aware * 1e6:.1f} | {naive / aware:.2f}x")
                print(f"| {name} | {m} | " + " | ".join(cells) + " |")
    return ratios


def summary(setting, ratios, target=1.5):
    print(f"\n{setting}: does the model predict >= {target}x over naive at TP >= 4?\n")
    print("| interconnect | TP | ratio range over both MLPs, m 1-16 | >= 1.5x at |")
    print("|---|---|---|---|")
    for link, _, _ in INTERCONNECTS:
        for w in WORLDS:
            if w < 4:
                continue
            hits = {key: r for key, r in ratios.items() if key[0] == link and key[2] == w}
            if not hits:
                continue
            met = [f"{name} m={m}" for (_, name, _, m), r in sorted(hits.items()) if r >= target]
            print(f"| {link} | {w} | {min(hits.values()):.2f}x - {max(hits.values()):.2f}x | "
                  f"{', '.join(met) if met else 'none'} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hbm-efficiency", type=float, default=1.0,
                        help="fraction of the HBM bandwidth the weight reads reach (1.0: the bound)")
    parser.add_argument("--measured", metavar="FILE",
                        help="bench_tp_mlp's output: also model this machine from its TP=1 rows")
    args = parser.parse_args()

    hbm = HBM_BYTES_PER_S * args.hbm_efficiency
    weights = {name: mats * weight_bytes(k1, n1) for name, k1, n1, _, mats in MLPS}
    print("Inputs:")
    for name, k1, n1, n2, mats in MLPS:
        print(f"  {name}: {k1} -> {n1} -> {n2}, {mats} matrices, {BITS}-bit g{GROUP}: "
              f"{weights[name] / 1e6:.1f} MB of weights")
    print(f"  h100: weights at {HBM_BYTES_PER_S / 1e12:.2f} TB/s x {args.hbm_efficiency:g}; permutation at the "
          f"same rate; fp16 activations (2 B)")
    for link, beta, alpha in INTERCONNECTS:
        print(f"  {link}: beta {beta / GB:.0f} GB/s, alpha {alpha * 1e6:g} us")
    print("  collectives: ring; all-gather (w-1) alpha + (w-1)/w B / beta, all-reduce 2 (w-1) alpha + 2 (w-1)/w B / beta")

    h100 = table("h100", lambda name, m, w: weights[name] / w / hbm, 2, lambda name, m: hbm)
    summary("h100", h100)
    print("\nAgainst the paper (Llama-70B MLP, H100, NVLink; measured TP-aware over naive):\n")
    print("| TP | paper | model, m = 1 .. 16 |")
    print("|---|---|---|")
    for w, measured in PAPER_H100.items():
        predicted = [h100[("NVLink 4", "llama-70b", w, m)] for m in BATCHES]
        print(f"| {w} | {measured:.2f}x | " + ", ".join(f"{r:.2f}x" for r in predicted) + " |")
    nvlink_alpha = INTERCONNECTS[0][2]
    compute = {w: weights["llama-70b"] / w / hbm for w in WORLDS}
    ceiling = ", ".join(f"TP={w}: {(compute[w] + 3 * (w - 1) * nvlink_alpha) / (compute[w] + 2 * (w - 1) * nvlink_alpha):.2f}x"
                        for w in WORLDS)
    print(f"\nWith every collective latency-bound the ratio is (C + 3 (w-1) alpha) / (C + 2 (w-1) alpha) < 1.5 "
          f"for any compute C; at NVLink's alpha on Llama-70B: {ceiling}.")

    if args.measured:
        measured = read_measured(args.measured)

        def compute(name, m, w):
            row = measured.get(name, {}).get(m)
            return None if row is None else row[0] * 1e-6 / w

        def permute_rate(name, m):
            row = measured.get(name, {}).get(m)
            n1 = next(n1 for mlp, _, n1, _, _ in MLPS if mlp == name)
            return 2 * m * n1 * 4 / (row[1] * 1e-6) if row and row[1] > 0 else hbm

        print(f"\nmeasured: TP=1 rows of {args.measured} (compute = TP=1 us / w; fp32 activations, 4 B; "
              f"the permutation at the TP=1 naive rate)")
        for name, per_m in measured.items():
            print("  " + name + ": " + ", ".join(
                f"m={m} {us:.0f} us, permute {permute_rate(name, m) / GB:.1f} GB/s" for m, (us, _) in sorted(per_m.items())))
        summary("measured", table("measured", compute, 4, permute_rate))


if __name__ == "__main__":
    main()
