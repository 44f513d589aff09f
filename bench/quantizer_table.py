#!/usr/bin/env python3
"""The table of docs/quantization.md from bench/quantizer_sweep.sh's JSON lines: one row per method,
one column per width in bits per weight, each cell the mean NLL and the bits per weight stored,
and the quantizing / calibrating seconds of the row's runs.

Usage: bench/quantizer_table.py RUNS.jsonl [MODEL_NAME]     (MODEL_NAME: smollm2, gemma3; default: all)
"""
import json
import sys

# Run names of quantizer_sweep.sh by row; the bits per weight they store place them in a column.
ROWS = [
    ("RTN", ["rtn2", "rtn2g32", "rtn3", "rtn3g32", "rtn4"]),
    ("HQQ, float offsets (the default)", ["hqq2", "hqq2g64", "hqq3", "hqq3g64", "hqq4"]),
    ("HQQ, integer zeros", ["hqq2i", "hqq3i", "hqq4i"]),
    ("MiLo over HQQ (the default), INT8 factors, +10 % bytes", ["milo3"]),
    ("MiLo over HQQ with float offsets", ["milo3_offsets"]),
    ("MiLo over RTN", ["milo3_rtn"]),
    ("2/4/16, by range", ["mixed25n", "mixed30n", "mixed35n"]),
    ("HQQ, calibrated, chosen per layer", ["hqq2c", "hqq3c", "hqq4c"]),
    ("GPTQ", ["gptq2", "gptq3", "gptq4"]),
    ("MiLo over GPTQ, INT8 factors, +10 % bytes", ["milo3c"]),
    ("2/4/16, a budget per matrix", ["mixed25", "mixed30", "mixed35"]),
    ("2/4/16, the budget shared by loss", ["mixed25l", "mixed30l", "mixed35l"]),
]
COLUMNS = [("~2.2", 0.0, 2.35), ("~2.5", 2.35, 2.75), ("~3", 2.75, 3.3), ("~3.5", 3.3, 3.75), ("~4", 3.75, 99.0)]


def span(values: list) -> str:
    """'lo-hi' seconds, 'v' for one value or equal ones, '-' for none."""
    if not values:
        return "-"
    lo, hi = round(min(values)), round(max(values))
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def table(runs: dict) -> str:
    lines = ["| method | " + " | ".join(name for name, _, _ in COLUMNS) + " | quantize / calibrate s |",
             "|---|" + "---|" * len(COLUMNS) + "---|"]
    for label, names in ROWS:
        cells = [[] for _ in COLUMNS]
        quantize, calibrate = [], []
        for name in names:
            if name not in runs:
                continue
            r = runs[name]
            bits = r["bits_per_weight"]
            column = next(i for i, (_, lo, hi) in enumerate(COLUMNS) if lo <= bits < hi)
            cells[column].append(f"{r['nll']:.3f} ({bits:.2f})")
            quantize.append(r.get("quantization_seconds", 0.0))
            if r.get("calibration_seconds"):
                calibrate.append(r["calibration_seconds"])
        if any(cells):
            seconds = f"{span(quantize)} / {span(calibrate)}"
            lines.append(f"| {label} | " + " | ".join("; ".join(c) for c in cells) + f" | {seconds} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    by_model: dict = {}
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            by_model.setdefault(r.get("model_name", "smollm2"), {})[r["run"]] = r  # the last run of a name wins
    for model, runs in by_model.items():
        if len(sys.argv) == 3 and model != sys.argv[2]:
            continue
        exact = runs.get("exact")
        print(f"{model}" + (f" (exact import: NLL {exact['nll']:.3f} at {exact['bits_per_weight']:.2f} bits per weight)"
                            if exact else ""))
        print()
        print(table(runs))
        print()


if __name__ == "__main__":
    main()
