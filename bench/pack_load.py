#!/usr/bin/env python3
"""Loading a model: qjit-run from the GGUF file against qjit-run from a pack file (--pack), alternately.

For each model and thread count: one run writes the pack (its load time is the import plus writing
and flushing the pack), then each round runs qjit-run without and with --pack, each decoding
--n-gen tokens after a 9-token prompt, and reports the medians of load seconds, tokens per second,
p50/p99 token times and peak resident memory (qjit-run's JSON; the mapped pack's pages count in
it), beside the file's bytes. The files are whole_model.py's (bench/whole_model.py makes them); the
page cache is warm for both (each is read by an untimed run first).

Usage: bench/pack_load.py [--rounds 3] [--threads 1,2] [--models smollm2-q4_1,1b-q4_0,7b-q4_0]
                          [--n-gen 64] [--json OUT] [--qjit BIN]
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import whole_model  # noqa: E402  (model paths, the prompt)

ROOT = Path(__file__).resolve().parent.parent


def qjit_run(binary, path, threads, n_gen, pack=None):
    command = [str(binary), "--model", str(path), "--threads", str(threads), "--json", "--generate", str(n_gen),
               "--prompt-tokens", whole_model.PROMPT]
    if pack:
        command += ["--pack", str(pack)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=whole_model.TIMEOUT_S)
    if done.returncode != 0:
        sys.exit(f"pack_load: {' '.join(command)} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--models", default="smollm2-q4_1,1b-q4_0,7b-q4_0")
    parser.add_argument("--n-gen", type=int, default=64)
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--qjit", default=str(ROOT / "build" / "tools" / "qjit-run"))
    args = parser.parse_args()
    threads_list = [int(t) for t in args.threads.split(",") if t]
    rows = []
    for name in [m for m in args.models.split(",") if m]:
        path = whole_model.model_path(name)
        if not path.exists():
            whole_model.note(f"skipping {name}: no file at {path} (bench/whole_model.py makes it)")
            continue
        for threads in threads_list:
            pack = whole_model.pack_path(path, threads)
            pack.unlink(missing_ok=True)
            qjit_run(args.qjit, path, threads, 1)  # the GGUF file into the page cache
            written = qjit_run(args.qjit, path, threads, 1, pack)
            rounds = {"gguf": [], "pack": []}
            for r in range(args.rounds):
                for mode in ("gguf", "pack"):
                    d = qjit_run(args.qjit, path, threads, args.n_gen, pack if mode == "pack" else None)
                    if mode == "pack" and d.get("pack") != "mapped":
                        sys.exit(f"pack_load: {pack} was not mapped: {d.get('pack')}")
                    rounds[mode].append(d)
                    whole_model.note(f"round {r + 1}/{args.rounds} {name} t={threads} {mode}: load "
                                     f"{d['load_seconds']:.2f} s, {d['tokens_per_second']:.2f} tokens/s")
            rows.append({"model": name, "threads": threads, "file_bytes": path.stat().st_size,
                         "pack_bytes": pack.stat().st_size, "write_seconds": written["load_seconds"],
                         "rounds": rounds})
            pack.unlink()

    def med(row, mode, key):
        return statistics.median(d[key] for d in row["rounds"][mode])

    lines = ["| file | threads | file GB | pack GB | pack written in s | load s: GGUF / pack | "
             "tokens/s: GGUF / pack | p50 ms | p99 ms | peak RSS / file: GGUF / pack |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        rss = [med(row, m, "peak_resident_bytes") / row["file_bytes"] for m in ("gguf", "pack")]
        lines.append(
            f"| {row['model']} | {row['threads']} | {row['file_bytes'] / 1e9:.3f} | {row['pack_bytes'] / 1e9:.3f} | "
            f"{row['write_seconds']:.2f} | {med(row, 'gguf', 'load_seconds'):.2f} / {med(row, 'pack', 'load_seconds'):.2f} | "
            f"{med(row, 'gguf', 'tokens_per_second'):.2f} / {med(row, 'pack', 'tokens_per_second'):.2f} | "
            f"{med(row, 'gguf', 'p50_ms'):.1f} / {med(row, 'pack', 'p50_ms'):.1f} | "
            f"{med(row, 'gguf', 'p99_ms'):.1f} / {med(row, 'pack', 'p99_ms'):.1f} | {rss[0]:.2f} / {rss[1]:.2f} |")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
