#!/usr/bin/env bash
# Builds llama.cpp from the source vendored in the PyPI sdist of llama-cpp-python (a benchmark-only
# peer: nothing of it is linked into qjit) and runs its decode benchmark on a GGUF model, so that
# qjit's figures can be compared with llama.cpp's measured on the same machine in the same hour.
#
# Usage: bench/peer_llama_cpp.sh [--isa-class C] [--model FILE.gguf] [--threads 1,2] [--jobs N]
#                                [--build-only]
#   --isa-class C  native (default: -DGGML_NATIVE=ON, built into build/peers/llama.cpp) or avx2,
#                  avx2_vnni, avx512, avx512_vnni (GGML_NATIVE=OFF and that class's GGML_* flags,
#                  built into build/peers/C/llama.cpp); the benchmark refuses a class this CPU lacks
#   --jobs N       parallel compile jobs (default: nproc)
#   Builds are kept between runs; the sdist is unpacked once into build/peers. The model defaults to
#   scripts/fetch_model.sh's. Prints llama-bench's JSON (tg128: 128 tokens decoded, 5 repetitions).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=0.3.36
model=""
threads=1,2
build_only=0
isa_class=native
jobs="$(nproc)"
while [ $# -gt 0 ]; do
  case "$1" in
    --isa-class) isa_class="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "peer_llama_cpp.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# The x86 flags of each class (ggml/CMakeLists.txt of the vendored llama.cpp); what a class leaves
# out is switched off explicitly, so no AVX-512, VNNI or AMX code slips into a narrower class.
avx2_cpu="avx avx2 fma f16c bmi2"
avx512_cpu="$avx2_cpu avx512f avx512cd avx512vl avx512dq avx512bw"
avx_vnni=OFF avx512=OFF avx512_vnni=OFF
case "$isa_class" in
  native) cpu_flags="" ;;
  avx2) cpu_flags="$avx2_cpu" ;;
  avx2_vnni) cpu_flags="$avx2_cpu avx_vnni" avx_vnni=ON ;;
  avx512) cpu_flags="$avx512_cpu" avx512=ON ;;
  avx512_vnni) cpu_flags="$avx512_cpu avx512_vnni" avx512=ON avx512_vnni=ON ;;
  *) echo "peer_llama_cpp.sh: --isa-class $isa_class is not native, avx2, avx2_vnni, avx512 or avx512_vnni" >&2
     exit 2 ;;
esac
if [ "$isa_class" = native ]; then
  isa_flags="-DGGML_NATIVE=ON"
else
  isa_flags="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_BMI2=ON -DGGML_AVX_VNNI=$avx_vnni -DGGML_AVX512=$avx512 -DGGML_AVX512_VNNI=$avx512_vnni
    -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
fi
peers="$root/build/peers"
if [ "$isa_class" = native ]; then out="$peers"; else out="$peers/$isa_class"; fi
source_dir="$peers/llama_cpp_python-$version/vendor/llama.cpp"
if [ ! -f "$source_dir/CMakeLists.txt" ]; then
  mkdir -p "$peers"
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$peers"
  tar -xzf "$peers/llama_cpp_python-$version.tar.gz" -C "$peers"
fi
bench="$out/llama.cpp/bin/llama-bench"
if [ ! -x "$bench" ]; then
  mkdir -p "$out"
  log="$out/llama.cpp-build.log"
  # -fno-dse: with GCC 12, dead-store elimination drops the stores that fill ggml's AMX tile
  # configuration (its _tile_loadconfig declares an 8-byte read), so on a CPU with AMX every prompt
  # run crashes in tinygemm_kernel_amx. Decode is unaffected either way.
  # shellcheck disable=SC2086  # $isa_flags is a list of words
  { echo "source: llama_cpp_python-$version sdist, ISA class $isa_class:" $isa_flags
    cmake -S "$source_dir" -B "$out/llama.cpp" -DCMAKE_BUILD_TYPE=Release $isa_flags -DLLAMA_CURL=OFF \
          -DCMAKE_C_FLAGS=-fno-dse -DCMAKE_CXX_FLAGS=-fno-dse \
          -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF &&
    cmake --build "$out/llama.cpp" -j "$jobs" --target llama-bench; } >"$log" 2>&1 ||
    { tail -n 40 "$log" >&2; echo "peer_llama_cpp.sh: the llama.cpp build failed; its log is $log" >&2; exit 1; }
  echo "llama_cpp_python-$version sdist, ISA class $isa_class" >"$out/llama.cpp/.peer-source"
fi
[ "$build_only" = 1 ] && { echo "$bench"; exit 0; }
for flag in $cpu_flags; do
  grep -m1 '^flags' /proc/cpuinfo | grep -qw -- "$flag" ||
    { echo "peer_llama_cpp.sh: this CPU lacks $flag, which ISA class $isa_class needs" >&2; exit 1; }
done
[ -n "$model" ] || model="$("$root/scripts/fetch_model.sh")"
"$bench" -m "$model" -t "$threads" -p 0 -n 128 -r 5 -o json
