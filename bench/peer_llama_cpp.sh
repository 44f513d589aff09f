#!/usr/bin/env bash
# Builds llama.cpp from the source vendored in the PyPI sdist of llama-cpp-python (a benchmark-only
# peer: nothing of it is linked into qjit) and runs its decode benchmark on a GGUF model, so that
# qjit's figures can be compared with llama.cpp's measured on the same machine in the same hour.
#
# Usage: bench/peer_llama_cpp.sh [--model FILE.gguf] [--threads 1,2] [--build-only]
#   The build goes to build/peers/llama.cpp (kept between runs); the model defaults to
#   scripts/fetch_model.sh's. Prints llama-bench's JSON (tg128: 128 tokens decoded, 5 repetitions).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=0.3.36
model=""
threads=1,2
build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "peer_llama_cpp.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
peers="$root/build/peers"
source_dir="$peers/llama_cpp_python-$version/vendor/llama.cpp"
if [ ! -f "$source_dir/CMakeLists.txt" ]; then
  mkdir -p "$peers"
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$peers"
  tar -xzf "$peers/llama_cpp_python-$version.tar.gz" -C "$peers"
fi
bench="$peers/llama.cpp/bin/llama-bench"
if [ ! -x "$bench" ]; then
  log="$peers/llama.cpp-build.log"
  # -fno-dse: with GCC 12, dead-store elimination drops the stores that fill ggml's AMX tile
  # configuration (its _tile_loadconfig declares an 8-byte read), so on a CPU with AMX every prompt
  # run crashes in tinygemm_kernel_amx. Decode is unaffected either way.
  { cmake -S "$source_dir" -B "$peers/llama.cpp" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
          -DCMAKE_C_FLAGS=-fno-dse -DCMAKE_CXX_FLAGS=-fno-dse \
          -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF &&
    cmake --build "$peers/llama.cpp" -j "$(nproc)" --target llama-bench; } >"$log" 2>&1 ||
    { tail -n 40 "$log" >&2; echo "peer_llama_cpp.sh: the llama.cpp build failed; its log is $log" >&2; exit 1; }
fi
[ "$build_only" = 1 ] && { echo "$bench"; exit 0; }
[ -n "$model" ] || model="$("$root/scripts/fetch_model.sh")"
"$bench" -m "$model" -t "$threads" -p 0 -n 128 -r 5 -o json
