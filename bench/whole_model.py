#!/usr/bin/env python3
"""Whole-model speed: qjit-run against llama.cpp and ik_llama.cpp on the same GGUF files.

For each model, thread count and test, the three engines run alternately, round by round, so all see
the same machine: decode (128 tokens; qjit-run --generate 128 after a 9-token prompt, llama-bench
-p 0 -n 128 -r 1) and prompt (512 tokens from an empty cache; qjit-run --prompt-bench 512
--bench-repeats 1, llama-bench -p 512 -n 0 -r 1). ik_llama.cpp runs with -rtr 1 (repack at load).
Decode rows are also held against the read floor: the probe's read bandwidth (qjit-tune's memory read
probe, run before and after the rounds, best kept) over the bytes a token reads (every weight tensor
but the token embedding, which is gathered; with a tied classifier the embedding is read). Prints
Markdown (medians in tokens/s, raw rounds); --json OUT also writes everything as JSON.

Models: smollm2-q4_1 (scripts/fetch_model.sh), smollm2-q4_0 (requantized from it by llama-quantize:
less precise, same speed), smollm2-q4_k_m (requantized the same way; 576-wide rows are no multiple of
256, so llama-quantize falls back to Q5_0 there and keeps Q4_K/Q6_K for ffn_down), 1b-q4_0, 1b-q4_k_m, 7b-q4_0, qwen2_0.5b-q4_0, qwen2_7b-q4_k_m (random weights,
bench/make_llama_gguf.py; the qwen2 files are not in the default set), gemma3-270m-q4_k_m (a real
file: scripts/fetch_model.sh --gemma3; not in the default set).
Peers: bench/peer_llama_cpp.sh and bench/peer_ik_llama.sh build them into build/peers. With --pack,
qjit-run maps its layers from a pack file per model and thread count (qjit-run --pack), which an
untimed run writes first.

ISA classes: --isa-class native (the default) lets each engine use all the CPU has (qjit-run with no
cap, the peers built with GGML_NATIVE=ON into build/peers/llama.cpp and build/peers/ik_llama.cpp).
avx2, avx2_vnni, avx512 or avx512_vnni holds all three to that class, so that a CPU with AVX-512 also
measures the AVX2 class: qjit-run --isa avx2|avx2-vnni|avx512|avx512-vnni (a cap), the peers built
with GGML_NATIVE=OFF and the class's GGML_AVX*/FMA/F16C flags (AVX-512, VNNI and AMX off where the
class lacks them) into build/peers/CLASS/llama.cpp and build/peers/CLASS/ik_llama.cpp, and a --pack
file per class (MODEL.t2.avx2.qjitpack beside native's MODEL.t2.qjitpack). A class the CPU cannot
run (a flag it needs missing from /proc/cpuinfo) is refused. The read and int8 probes (qjit-tune)
take no cap: they measure the machine with its widest loads whatever the class. The model files
are shared by the classes. The class is in the report's title and the JSON's "isa_class".

Usage: bench/whole_model.py [--rounds 3] [--threads 1,2] [--models smollm2-q4_1,1b-q4_0]
                            [--tests decode,prompt] [--isa-class native] [--skip-build] [--pack]
                            [--json OUT] [--qjit BIN] [--ik-git-dir GITDIR | --ik-source DIR]
"""
import argparse
import datetime
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.dont_write_bytecode = True  # no bench/__pycache__ in the work tree
import make_llama_gguf  # noqa: E402  (its llama-quantize helpers)

PEERS = ROOT / "build" / "peers"
MODEL_DIR = PEERS / "models"
PROMPT = "6403,1980,253,655,28,665,436,253,1838"  # SmolLM2: "Once upon a time, there was a little"
ENGINES = ["llama.cpp", "ik_llama.cpp", "qjit-run"]
MODELS = ["smollm2-q4_0", "smollm2-q4_1", "smollm2-q4_k_m", "1b-q4_0", "1b-q4_k_m", "7b-q4_0", "qwen2_0.5b-q4_0", "qwen2_7b-q4_k_m",
          "gemma3-270m-q4_k_m"]
DEFAULT_MODELS = MODELS[:6]
TIMEOUT_S = 3600
# ISA class -> (qjit-run --isa value, /proc/cpuinfo flags the class needs: qjit's and the peers' builds).
ISA_CLASSES = {
    "native": (None, ()),
    "avx2": ("avx2", ("avx", "avx2", "fma", "f16c", "bmi2")),
    "avx2_vnni": ("avx2-vnni", ("avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni")),
    "avx512": ("avx512", ("avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512cd", "avx512vl", "avx512dq",
                          "avx512bw")),
    "avx512_vnni": ("avx512-vnni", ("avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512cd", "avx512vl",
                                    "avx512dq", "avx512bw", "avx512_vnni")),
}


def note(*args):
    print("whole_model:", *args, file=sys.stderr, flush=True)


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def check_isa_class(isa_class):
    """Exits with a message when this CPU lacks a flag the class needs."""
    needed = ISA_CLASSES[isa_class][1]
    if not needed:
        return
    flags = cpu_flags()
    if flags is None:
        sys.exit(f"whole_model: --isa-class {isa_class}: cannot read the CPU's flags from /proc/cpuinfo")
    missing = [f for f in needed if f not in flags]
    if missing:
        sys.exit(f"whole_model: this CPU cannot run ISA class {isa_class}: /proc/cpuinfo lacks "
                 f"{', '.join(missing)} (it needs {', '.join(needed)})")


def peer_dir(isa_class):
    """Where bench/peer_*.sh build a class: build/peers for native (as before classes), else build/peers/CLASS."""
    return PEERS if isa_class == "native" else PEERS / isa_class


def model_path(name):
    if name in ("smollm2-q4_1", "gemma3-270m-q4_k_m"):
        fetch = [str(ROOT / "scripts" / "fetch_model.sh")] + (["--gemma3"] if name.startswith("gemma3") else [])
        return Path(subprocess.run(fetch, check=True, capture_output=True, text=True).stdout.strip())
    if name in ("smollm2-q4_0", "smollm2-q4_k_m"):
        return MODEL_DIR / f"SmolLM2-135M-Instruct.{name.split('-', 1)[1].upper()}.requantized.gguf"
    shape, type_name = name.split("-", 1)
    return MODEL_DIR / f"{make_llama_gguf.file_stem(shape)}.{type_name.upper()}.gguf"


def make_model(name, path):
    if name in ("smollm2-q4_0", "smollm2-q4_k_m"):
        type_name = name.split("-", 1)[1].upper()
        note(f"making {path} by llama-quantize --allow-requantize from the Q4_1 file")
        path.parent.mkdir(parents=True, exist_ok=True)
        make_llama_gguf.quantize(model_path("smollm2-q4_1"), path, type_name, allow_requantize=True)
    else:
        shape, type_name = name.split("-", 1)
        note(f"making {path} with bench/make_llama_gguf.py (the 7B takes minutes and ~14 GB of free disk)")
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_llama_gguf.py"), "--models",
                        f"{shape}-{type_name.upper()}", "--out-dir", str(path.parent)], check=True,
                       stdout=subprocess.DEVNULL)


def bytes_per_token(path):
    """Bytes of the weight tensors a decoded token reads: all but the gathered token embedding
    (read in full when it doubles as the classifier, i.e. when there is no output.weight)."""
    import gguf
    reader = gguf.GGUFReader(str(path))
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    tied = "output.weight" not in sizes
    return sum(n for name, n in sizes.items() if name != "token_embd.weight" or tied)


def run(command):
    """(stdout, None) or (None, error message)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {TIMEOUT_S} s"
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
        how = f"exit {done.returncode}"
        if done.returncode < 0:
            try:
                how = f"killed by {signal.Signals(-done.returncode).name}"
            except ValueError:
                pass
        return None, how + (": " + " | ".join(lines[-3:]) if lines else "")
    return done.stdout, None


def probe(qjit_tune, threads):
    """qjit-tune's read probe (GB/s) and int8 peak (T MAC/s) on 1 thread and on `threads`, from a
    run that tunes the tiny stories260K shapes into a throwaway database."""
    with tempfile.TemporaryDirectory() as tmp:
        out, error = run([str(qjit_tune), "--model", str(ROOT / "configs" / "models" / "stories260K.yaml"),
                          "--batch", "1", "--threads", str(threads), "--budget", "0", "--no-compare",
                          "--repeats", "1", "--db", str(Path(tmp) / "tuning.yaml")])
    if error:
        note(f"the read probe (qjit-tune) failed: {error}")
        return None
    result = {"gbps": {}, "tmacs": {}, "loads": None, "int8_instruction": None}
    m = re.search(r"memory read probe \((\S+) loads.*?\): ([\d.]+) GB/s on 1 thread, ([\d.]+) GB/s on (\d+)", out)
    if m:
        result["loads"] = m.group(1)
        result["gbps"] = {1: float(m.group(2)), int(m.group(4)): float(m.group(3))}
    m = re.search(r"memory read probe after timing: ([\d.]+) GB/s on (\d+) threads", out)
    if m:
        t = int(m.group(2))
        result["gbps"][t] = max(result["gbps"].get(t, 0.0), float(m.group(1)))
    m = re.search(r"int8 dot-product peak \((.*?), best.*?\): ([\d.]+) T MAC/s on 1 thread, ([\d.]+) T MAC/s on (\d+)",
                  out)
    if m:
        result["int8_instruction"] = m.group(1)
        result["tmacs"] = {1: float(m.group(2)), int(m.group(4)): float(m.group(3))}
    return result


def probes(qjit_tune, threads_list):
    """Best read bandwidth and int8 peak per thread count over one probe run per needed count."""
    best = {"gbps": {}, "tmacs": {}, "loads": None, "int8_instruction": None}
    for t in sorted(set(threads_list), reverse=True):  # a run on T threads also measures 1 thread
        if t in best["gbps"]:
            continue
        got = probe(qjit_tune, t)
        if not got:
            return None
        best["loads"] = got["loads"]
        best["int8_instruction"] = got["int8_instruction"]
        for key in ("gbps", "tmacs"):
            for k, v in got[key].items():
                best[key][k] = max(best[key].get(k, 0.0), v)
    return best


def pack_path(path, threads, isa_class="native"):
    """The pack file qjit-run maps a model's layers from with --pack (one per thread count: each holds
    the tilings tuned for its threads; and one per ISA class, whose kernels differ)."""
    suffix = "" if isa_class == "native" else f".{isa_class}"
    return path.with_name(f"{path.stem}.t{threads}{suffix}.qjitpack")


def engine_command(engine, bins, path, threads, test, n_gen, n_prompt, pack=False, isa_class="native"):
    if engine == "qjit-run":
        command = [str(bins[engine]), "--model", str(path), "--threads", str(threads), "--json"]
        if ISA_CLASSES[isa_class][0]:
            command += ["--isa", ISA_CLASSES[isa_class][0]]
        if pack:
            command += ["--pack", str(pack_path(path, threads, isa_class))]
        if test == "decode":
            return command + ["--generate", str(n_gen), "--prompt-tokens", PROMPT]
        return command + ["--prompt-bench", str(n_prompt), "--bench-repeats", "1"]
    command = [str(bins[engine]), "-m", str(path), "-t", str(threads), "-r", "1", "-o", "json"]
    command += ["-p", "0", "-n", str(n_gen)] if test == "decode" else ["-p", str(n_prompt), "-n", "0"]
    if engine == "ik_llama.cpp":
        command += ["-rtr", "1"]
    return command


def measure(engine, bins, path, threads, test, n_gen, n_prompt, pack=False, isa_class="native"):
    """{"tps": tokens/s, ...details} or {"error": message}."""
    out, error = run(engine_command(engine, bins, path, threads, test, n_gen, n_prompt, pack, isa_class))
    if error:
        return {"error": error}
    try:
        if engine == "qjit-run":
            d = json.loads(out)
            key = "tokens_per_second" if test == "decode" else "prompt_bench_tokens_per_second"
            result = {"tps": d[key], "load_seconds": d.get("load_seconds"),
                      "peak_resident_bytes": d.get("peak_resident_bytes"), "pack": d.get("pack")}
            if test == "decode":
                result.update(p50_ms=d.get("p50_ms"), p99_ms=d.get("p99_ms"))
            return result
        d = json.loads(out)[0]
        return {"tps": d["avg_ts"], "build_commit": d.get("build_commit"), "build_number": d.get("build_number"),
                "flash_attn": d.get("flash_attn")}
    except (ValueError, KeyError, IndexError) as e:
        return {"error": f"unreadable output ({e}): {out[-300:]!r}"}


def engine_version(engine, binary):
    """What is known of a peer's source: the ik_llama.cpp commit bench/peer_ik_llama.sh recorded, the
    llama-cpp-python sdist bench/peer_llama_cpp.sh unpacked (their llama-bench's own build_commit
    names whatever git repository encloses the build, i.e. qjit's). The scripts record them in the
    build folder (bin/..); builds from before that are looked up in build/peers."""
    build = binary.parent.parent
    if engine == "ik_llama.cpp":
        for commit in (build / ".peer-commit", build.parent / "ik_llama.cpp-src" / ".peer-commit"):
            if commit.exists():
                return f" (commit {commit.read_text().strip()[:12]})"
    if engine == "llama.cpp":
        source = build / ".peer-source"
        if source.exists():
            return f" (from the {source.read_text().strip()})"
        sdists = sorted(p.name for p in build.parent.glob("llama_cpp_python-*") if p.is_dir())
        if sdists:
            return f" (from the {sdists[-1]} sdist)"
    return ""


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"subset of {','.join(MODELS)}")
    parser.add_argument("--tests", default="decode,prompt")
    parser.add_argument("--isa-class", default="native", choices=list(ISA_CLASSES),
                        help="the instruction sets all engines are held to (default native: all the CPU has; "
                             "else qjit-run --isa and peers built for the class into build/peers/CLASS)")
    parser.add_argument("--n-gen", type=int, default=128, help="decode tokens (128)")
    parser.add_argument("--n-prompt", type=int, default=512, help="prompt tokens (512)")
    parser.add_argument("--skip-build", action="store_true",
                        help="build no peer and make no model file: skip what is missing")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    parser.add_argument("--pack", action="store_true",
                        help="qjit-run maps its layers from a pack file per model and thread count, written "
                             "by an untimed run first (qjit-run --pack)")
    parser.add_argument("--qjit", default=str(ROOT / "build" / "tools" / "qjit-run"), help="the qjit-run binary")
    parser.add_argument("--qjit-tune", help="qjit-tune, whose probes give the floors (default: beside --qjit)")
    parser.add_argument("--llama-bench", help="llama.cpp's llama-bench (default: build/peers/[CLASS/]llama.cpp/bin/"
                                              "llama-bench, which bench/peer_llama_cpp.sh builds)")
    parser.add_argument("--ik-bench", help="ik_llama.cpp's llama-bench (default: build/peers/[CLASS/]ik_llama.cpp/bin/"
                                           "llama-bench, which bench/peer_ik_llama.sh builds)")
    parser.add_argument("--ik-git-dir", help="passed to bench/peer_ik_llama.sh --git-dir")
    parser.add_argument("--ik-source", help="passed to bench/peer_ik_llama.sh --source")
    args = parser.parse_args()
    threads_list = [int(t) for t in args.threads.split(",") if t]
    tests = [t for t in args.tests.split(",") if t]
    names = [m for m in args.models.split(",") if m]
    for bad in [m for m in names if m not in MODELS] + [t for t in tests if t not in ("decode", "prompt")]:
        sys.exit(f"whole_model: unknown model or test {bad!r} (models: {', '.join(MODELS)}; tests: decode, prompt)")
    isa_class = args.isa_class
    check_isa_class(isa_class)

    peers = peer_dir(isa_class)
    bins = {"qjit-run": Path(args.qjit),
            "llama.cpp": Path(args.llama_bench or peers / "llama.cpp" / "bin" / "llama-bench"),
            "ik_llama.cpp": Path(args.ik_bench or peers / "ik_llama.cpp" / "bin" / "llama-bench")}
    if not args.skip_build:
        builds = {"llama.cpp": [str(ROOT / "bench" / "peer_llama_cpp.sh"), "--build-only", "--isa-class", isa_class],
                  "ik_llama.cpp": [str(ROOT / "bench" / "peer_ik_llama.sh"), "--build-only", "--isa-class", isa_class]}
        if args.ik_git_dir:
            builds["ik_llama.cpp"] += ["--git-dir", args.ik_git_dir]
        if args.ik_source:
            builds["ik_llama.cpp"] += ["--source", args.ik_source]
        for engine, command in builds.items():
            if not bins[engine].exists():
                note(f"building {engine} (minutes): {' '.join(command)}")
                if subprocess.run(command, stdout=subprocess.DEVNULL).returncode != 0:
                    note(f"building {engine} failed; it is skipped")
    engines = []
    for engine in ENGINES:
        if os.access(bins[engine], os.X_OK):
            engines.append(engine)
        else:
            note(f"skipping {engine}: no binary at {bins[engine]}")

    models = {}
    for name in names:
        path = model_path(name)
        if not path.exists() and not args.skip_build:
            try:
                make_model(name, path)
            except (subprocess.CalledProcessError, SystemExit) as e:
                note(f"making {name} failed ({e})")
        if path.exists():
            models[name] = path
        else:
            note(f"skipping {name}: no file at {path}")

    qjit_tune = Path(args.qjit_tune) if args.qjit_tune else Path(args.qjit).parent / "qjit-tune"
    probe_runs = []
    if os.access(qjit_tune, os.X_OK):
        probe_runs.append(probes(qjit_tune, threads_list))
    else:
        note(f"no read floor: no qjit-tune at {qjit_tune}")

    if args.pack and "qjit-run" in engines:
        for name, path in models.items():
            for t in threads_list:
                _, error = run(engine_command("qjit-run", bins, path, t, "decode", 1, args.n_prompt, pack=True,
                                              isa_class=isa_class))
                note(f"pack {pack_path(path, t, isa_class)}: " + (f"error: {error}" if error else "written or fresh"))

    rows = {}  # (model, test, threads) -> engine -> [round results]
    for round_index in range(args.rounds):
        for name, path in models.items():
            for test in tests:
                for t in threads_list:
                    row = rows.setdefault((name, test, t), {e: [] for e in engines})
                    for engine in engines:
                        result = measure(engine, bins, path, t, test, args.n_gen, args.n_prompt, args.pack,
                                         isa_class)
                        row[engine].append(result)
                        shown = fmt(result.get("tps")) if "error" not in result else "error: " + result["error"]
                        note(f"round {round_index + 1}/{args.rounds} {name} {test} t={t} {engine}: {shown}")
    if probe_runs and probe_runs[0] is not None:
        probe_runs.append(probes(qjit_tune, threads_list))
    probe_runs = [p for p in probe_runs if p]
    floor_gbps = {t: max(p["gbps"].get(t, 0.0) for p in probe_runs) or None for t in threads_list} if probe_runs else {}
    peak_tmacs = {t: max(p["tmacs"].get(t, 0.0) for p in probe_runs) or None for t in threads_list} if probe_runs else {}
    token_bytes = {name: bytes_per_token(path) for name, path in models.items()}

    # The report.
    if isa_class == "native":
        isa_text = "ISA class native: qjit-run uncapped, the peers built with GGML_NATIVE=ON (-march=native)"
    else:
        isa_text = (f"ISA class {isa_class}: qjit-run --isa {ISA_CLASSES[isa_class][0]}, the peers built with "
                    f"GGML_NATIVE=OFF and the {isa_class} flags (bench/peer_*.sh --isa-class {isa_class}); "
                    "the probes measure with the CPU's widest loads")
    if args.llama_bench or args.ik_bench:
        isa_text += " (peers given by --llama-bench/--ik-bench: as they were built)"
    lines = [f"# Whole-model speed, ISA class {isa_class}, {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}", "",
             f"{isa_text}.", "",
             f"{cpu_name()}, {os.cpu_count()} logical CPUs; {args.rounds} round(s), engines alternated within "
             f"each round; medians in tokens/s. decode: {args.n_gen} tokens after a 9-token prompt (qjit-run) "
             f"or from an empty cache (llama-bench tg{args.n_gen}); prompt: {args.n_prompt} tokens "
             f"(pp{args.n_prompt}). ik_llama.cpp with -rtr 1.", ""]
    for engine in engines:
        lines.append(f"- {engine}: {bins[engine]}{engine_version(engine, bins[engine])}")
    lines.append("")
    if probe_runs:
        p = probe_runs[0]
        lines.append("Read probe (qjit-tune, %s loads, best of the runs before and after): %s. "
                     "int8 dot-product peak (%s): %s." % (
                         p["loads"], ", ".join(f"{fmt(floor_gbps[t])} GB/s on {t} thread(s)" for t in threads_list),
                         p["int8_instruction"],
                         ", ".join(f"{fmt(peak_tmacs[t], 3)} T MAC/s on {t} thread(s)" for t in threads_list)))
        lines.append("")
    for name, path in models.items():
        lines.append(f"- {name}: {path} ({token_bytes[name] / 1e6:.1f} MB read per decoded token)")
    for name in ("smollm2-q4_0", "smollm2-q4_k_m"):
        if name in models:
            lines.append(f"- {name} is requantized from the Q4_1 file (llama-quantize --allow-requantize): "
                         "less precise than one made from the original weights, but the same speed")
    if "smollm2-q4_k_m" in models:
        lines.append("- smollm2-q4_k_m holds Q5_0 tensors where rows of 576 are no multiple of 256 (llama-quantize's "
                     "fallback), Q4_K and Q6_K ffn_down, Q8_0 attn_v and embedding")
    if any(n[:2] in ("1b", "7b") for n in models):
        lines.append("- the 1b/7b/qwen2 files hold random weights (bench/make_llama_gguf.py): speed only")
    lines += ["", "| file | test | threads | " + " | ".join(ENGINES) +
              " | qjit / best | read floor | qjit / floor |", "|---" * (len(ENGINES) + 6) + "|"]

    def median_tps(results):
        values = [r["tps"] for r in results if "tps" in r]
        return statistics.median(values) if values else None

    summary = []
    for (name, test, t), row in rows.items():
        medians = {e: median_tps(row.get(e, [])) for e in ENGINES}
        peers = [medians[e] for e in ("llama.cpp", "ik_llama.cpp") if medians[e]]
        qjit = medians["qjit-run"]
        floor = None
        if test == "decode" and floor_gbps.get(t):
            floor = floor_gbps[t] * 1e9 / token_bytes[name]
        cells = []
        for e in ENGINES:
            if e not in row:
                cells.append("skipped")
            elif medians[e] is None:
                cells.append("error")
            else:
                cells.append(fmt(medians[e]))
        lines.append(f"| {name} | {test} | {t} | " + " | ".join(cells) +
                     f" | {fmt(qjit / max(peers), 2) if qjit and peers else '-'} | {fmt(floor)}"
                     f" | {fmt(qjit / floor, 2) if qjit and floor else '-'} |")
        summary.append({"model": name, "file": str(models[name]), "test": test, "threads": t,
                        "median_tps": medians, "floor_tps": floor,
                        "qjit_over_best_peer": qjit / max(peers) if qjit and peers else None,
                        "rounds": row})

    lines += ["", "Raw rounds (tokens/s; decode: fraction of the read floor in brackets):", ""]
    for s in summary:
        parts = []
        for e in ENGINES:
            if e not in s["rounds"]:
                continue
            values = []
            for r in s["rounds"][e]:
                if "tps" not in r:
                    values.append("error")
                else:
                    values.append(fmt(r["tps"]) + (f" ({r['tps'] / s['floor_tps']:.2f})" if s["floor_tps"] else ""))
            parts.append(f"{e} {', '.join(values)}")
        lines.append(f"- {s['model']} {s['test']} t={s['threads']}: " + "; ".join(parts))

    if "qjit-run" in engines:
        lines += ["", "qjit-run load and memory (medians over rounds):", "",
                  "| file | test | threads | load s | pack | peak RSS MiB | p50 ms | p99 ms |",
                  "|---|---|---|---|---|---|---|---|"]
        for s in summary:
            ok = [r for r in s["rounds"]["qjit-run"] if "tps" in r]

            def med(key, ok=ok):
                values = [r[key] for r in ok if r.get(key) is not None]
                return statistics.median(values) if values else None
            rss = med("peak_resident_bytes")
            packs = sorted({r["pack"].split(" ")[0] for r in ok if r.get("pack")}) or ["none"]
            lines.append(f"| {s['model']} | {s['test']} | {s['threads']} | {fmt(med('load_seconds'), 2)} | "
                         f"{'/'.join(packs)} | {fmt(rss / 2**20 if rss else None, 0)} | {fmt(med('p50_ms'), 2)} | {fmt(med('p99_ms'), 2)} |")

    errors = sorted({f"{e} on {s['model']} ({s['test']}, t={s['threads']}): {r['error']}"
                     for s in summary for e, rs in s["rounds"].items() for r in rs if "error" in r})
    if errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in errors]
        if any(e.startswith("llama.cpp") and ("SIGILL" in e or "SIGSEGV" in e) for e in errors):
            lines.append("- (llama.cpp built -march=native by GCC 12 on an AMX CPU: GCC 12's _tile_loadconfig "
                         "declares an 8-byte memory operand, so the tile-config stores are dropped and the AMX "
                         "kernels crash; build it with -DCMAKE_C_FLAGS=-fno-dse -DCMAKE_CXX_FLAGS=-fno-dse and "
                         "pass that llama-bench with --llama-bench)")
    report = "\n".join(lines)
    print(report)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"cpu": cpu_name(), "isa_class": isa_class, "qjit_isa": ISA_CLASSES[isa_class][0],
                       "rounds": args.rounds, "threads": threads_list, "engines": engines,
                       "binaries": {e: str(bins[e]) for e in engines}, "probes": probe_runs,
                       "read_floor_gbps": floor_gbps, "int8_peak_tmacs": peak_tmacs,
                       "bytes_per_token": token_bytes, "rows": summary, "markdown": report}, out, indent=1)


if __name__ == "__main__":
    main()
