#!/usr/bin/env python3
"""Times bench_linear from two builds, interleaved, and prints each row's new/old time ratio.

Both builds share one scratch tuning database, so the first run tunes and every later run takes
the same tilings from it: what differs is the code between the C API and the kernels. Each round
runs old then new (alternating which goes first), so drift of a shared machine falls on both.

  bench/compare_builds.py OLD_BUILD NEW_BUILD [--rounds 5] [--filter REGEX]

Prints a markdown table (median of each build's per-round medians, and the ratio) and the median
ratio over the rows.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DEFAULT_FILTER = r"linear/q[234]g128/(4096x11008|11008x4096)/m(1|16)/t(1|all)/f32"


def run_bench(build, row_filter, database, out_path):
    env = dict(os.environ, QJIT_TUNING_DB=database)
    command = [os.path.join(build, "bench", "bench_linear"), "--benchmark_filter=" + row_filter,
               "--benchmark_out=" + out_path, "--benchmark_out_format=json"]
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out_path) as out:
        rows = json.load(out)["benchmarks"]
    return {row["run_name"]: row["real_time"] for row in rows if row.get("aggregate_name") == "median"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old_build")
    parser.add_argument("new_build")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--filter", default=DEFAULT_FILTER)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        database = os.path.join(scratch, "tuning.yaml")
        out_path = os.path.join(scratch, "out.json")
        run_bench(args.old_build, args.filter, database, out_path)  # tunes once, into the database
        times = {"old": {}, "new": {}}
        for round_index in range(args.rounds):
            order = ["old", "new"] if round_index % 2 == 0 else ["new", "old"]
            for side in order:
                build = args.old_build if side == "old" else args.new_build
                for name, us in run_bench(build, args.filter, database, out_path).items():
                    times[side].setdefault(name, []).append(us)
            print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    print("| row | old µs | new µs | new / old |")
    print("|---|---|---|---|")
    ratios = []
    for name in sorted(times["old"]):
        old = statistics.median(times["old"][name])
        new = statistics.median(times["new"][name])
        ratios.append(new / old)
        print(f"| {name} | {old:.1f} | {new:.1f} | {new / old:.3f} |")
    print(f"\nmedian new/old over {len(ratios)} rows, {args.rounds} rounds: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
