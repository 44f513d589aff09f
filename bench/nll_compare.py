#!/usr/bin/env python3
"""Paired NLL differences between runs over the same token sequences, with their standard error.

Each input is a JSON file with "per_sequence_nll_sum" (qjit-run --tokens FILE --json, or
../shared/smollm2/eval_nll.json, llama.cpp's). The difference of two runs is the sum over sequences
of their NLL sums' differences over the predicted tokens (the sequence lengths less one, read from
the *.seq.u32 file). Its standard error comes from a bootstrap over sequences: the runs share the
text, so only how each rounds its arithmetic differs, and a sequence is the unit that rounding
differences carry through (its positions attend to each other).

Usage: bench/nll_compare.py --tokens eval.seq.u32 BASE.json OTHER.json [OTHER.json ...]
Prints, for each OTHER, its mean NLL, the difference from BASE and the difference's standard error.
"""
import argparse
import json
import sys

import numpy as np


def predicted_tokens(path):
    words = np.fromfile(path, dtype="<u4")
    count = int(words[0])
    return words[1:1 + count].astype(np.int64) - 1


def sums(path):
    with open(path) as f:
        return np.array(json.load(f)["per_sequence_nll_sum"], dtype=np.float64)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", required=True, help="the *.seq.u32 file the runs scored")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("base")
    parser.add_argument("others", nargs="+")
    args = parser.parse_args()
    predicted = predicted_tokens(args.tokens)
    base = sums(args.base)
    if len(base) != len(predicted):
        sys.exit(f"nll_compare: {args.base} has {len(base)} sequences; {args.tokens} has {len(predicted)}")
    rng = np.random.default_rng(0)
    draws = rng.integers(0, len(base), size=(args.resamples, len(base)))
    print(f"base {args.base}: mean NLL {base.sum() / predicted.sum():.6f}")
    print("| run | mean NLL | - base | standard error |")
    print("|---|---|---|---|")
    for path in args.others:
        other = sums(path)
        if len(other) != len(base):
            sys.exit(f"nll_compare: {path} has {len(other)} sequences; the base has {len(base)}")
        difference = other - base
        resampled = difference[draws].sum(axis=1) / predicted[draws].sum(axis=1)
        print(f"| {path} | {other.sum() / predicted.sum():.6f} | {difference.sum() / predicted.sum():+.2e} "
              f"| {resampled.std():.1e} |")


if __name__ == "__main__":
    main()
