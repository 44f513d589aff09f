#!/usr/bin/env bash
# Builds ik_llama.cpp's llama-bench (a benchmark-only peer: nothing of it is linked into qjit) with
# its best CPU settings (Release, -march=native or an ISA class's flags, OpenMP, its iqk
# matrix-multiplication and flash-attention kernels) and runs its decode benchmark on a GGUF model
# with -rtr 1 (the weights repacked at load into its row-interleaved layouts: ik_llama's fastest CPU
# path).
#
# Usage: bench/peer_ik_llama.sh [--source DIR | --git-dir GITDIR] [--isa-class C] [--model FILE.gguf]
#                               [--threads 1,2] [--jobs N] [--build-only] [--rebuild]
#   --source DIR     an ik_llama.cpp checkout to build from
#   --git-dir GITDIR a (bare) ik_llama.cpp repository: its HEAD is exported with git archive
#   neither          git clone --depth 1 https://github.com/ikawrakow/ik_llama.cpp
#   --isa-class C    native (default: -DGGML_NATIVE=ON, built into build/peers/ik_llama.cpp) or avx2,
#                    avx2_vnni, avx512, avx512_vnni (GGML_NATIVE=OFF and that class's GGML_* flags,
#                    built into build/peers/C/ik_llama.cpp); the benchmark refuses a class this CPU lacks
#   --jobs N         parallel compile jobs (default: nproc)
#   The source goes to build/peers/ik_llama.cpp-src (shared by the classes), the builds as above (all
#   kept between runs; --rebuild builds this class again). --build-only prints llama-bench's path;
#   otherwise prints llama-bench's JSON (tg128, 5 repetitions) for the model (default:
#   scripts/fetch_model.sh's).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
url=https://github.com/ikawrakow/ik_llama.cpp
source_dir=""
git_dir=""
model=""
threads=1,2
build_only=0
rebuild=0
isa_class=native
jobs="$(nproc)"
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_dir="$(cd "$2" && pwd)"; shift 2 ;;
    --git-dir) git_dir="$2"; shift 2 ;;
    --isa-class) isa_class="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --rebuild) rebuild=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "peer_ik_llama.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# The x86 flags of each class (ik_llama.cpp's ggml/CMakeLists.txt: AVX-VNNI is GGML_AVXVNNI there,
# and it has no SSE4.2, BMI2 or AMX options); what a class leaves out is switched off explicitly.
# GGML_AVX512 adds -mavx512f and -mavx512bw only, but ik_llama.cpp's AVX-512 code also takes DQ and
# VL for granted (iqk_fa_templates.h calls an __m512 v_tanh that iqk_utils.h defines under
# __AVX512DQ__), so the AVX-512 classes add the rest of the Skylake-X set themselves.
avx2_cpu="avx avx2 fma f16c"
avx512_cpu="$avx2_cpu avx512f avx512bw avx512cd avx512dq avx512vl"
avx512_cflags="-mavx512cd -mavx512dq -mavx512vl"
avx_vnni=OFF avx512=OFF avx512_vnni=OFF
case "$isa_class" in
  native) cpu_flags="" ;;
  avx2) cpu_flags="$avx2_cpu" ;;
  avx2_vnni) cpu_flags="$avx2_cpu avx_vnni" avx_vnni=ON ;;
  avx512) cpu_flags="$avx512_cpu" avx512=ON ;;
  avx512_vnni) cpu_flags="$avx512_cpu avx512_vnni" avx512=ON avx512_vnni=ON ;;
  *) echo "peer_ik_llama.sh: --isa-class $isa_class is not native, avx2, avx2_vnni, avx512 or avx512_vnni" >&2
     exit 2 ;;
esac
if [ "$isa_class" = native ]; then
  isa_flags="-DGGML_NATIVE=ON"
else
  isa_flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_AVXVNNI=$avx_vnni -DGGML_AVX512=$avx512 -DGGML_AVX512_VNNI=$avx512_vnni
    -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_BF16=OFF"
fi
extra_cflags=""  # CFLAGS and CXXFLAGS of the first configure
[ "$avx512" = ON ] && extra_cflags="$avx512_cflags"
peers="$root/build/peers"
if [ "$isa_class" = native ]; then out="$peers"; else out="$peers/$isa_class"; fi
build="$out/ik_llama.cpp"
log="$out/ik_llama.cpp-build.log"
if [ -z "$source_dir" ]; then
  source_dir="$peers/ik_llama.cpp-src"
  if [ ! -f "$source_dir/.peer-commit" ] || { [ "$rebuild" = 1 ] && [ -n "$git_dir" ]; }; then
    partial="$source_dir.partial"  # renamed when complete, so a failed export is never built
    rm -rf "$source_dir" "$partial"
    mkdir -p "$partial"
    if [ -n "$git_dir" ]; then
      # A partial mirror may lack some large blobs (the server's web UI, test vocabularies): those
      # files are left out of the export; llama-bench does not need them.
      excludes=()
      while read -r path; do excludes+=(":(exclude)$path"); done < <(
        git --git-dir="$git_dir" ls-tree -r HEAD | awk '$2 == "blob" { print $3 }' |
          git --git-dir="$git_dir" cat-file --batch-check='%(objectname) %(objecttype)' |
          awk '$2 == "missing" { print $1 }' | while read -r blob; do
            git --git-dir="$git_dir" ls-tree -r HEAD | awk -v b="$blob" '$3 == b { sub(/^[^\t]*\t/, ""); print }'
          done)
      [ ${#excludes[@]} -eq 0 ] ||
        echo "peer_ik_llama.sh: left out ${#excludes[@]} file(s) absent from $git_dir: ${excludes[*]#:(exclude)}" >&2
      # (git still reports the excluded blobs as invalid objects while it reads the tree: noise)
      git --git-dir="$git_dir" archive HEAD -- . "${excludes[@]}" 2> >(grep -v '^error: invalid object' >&2) |
        tar -x -C "$partial"
      git --git-dir="$git_dir" rev-parse HEAD >"$partial/.peer-commit"
    else
      git clone --quiet --depth 1 "$url" "$partial"
      git -C "$partial" rev-parse HEAD >"$partial/.peer-commit"
    fi
    mv "$partial" "$source_dir"
  fi
fi
bench="$build/bin/llama-bench"
if [ ! -x "$bench" ] || [ "$rebuild" = 1 ]; then
  mkdir -p "$out"
  # Examples must be configured (llama-bench is one of them), but only llama-bench is built.
  # GGML_IQK_FA_ALL_QUANTS (flash-attention kernels for quantized KV caches) is off: llama-bench
  # uses an f16 cache, and those kernels only lengthen the build.
  commit="$(cat "$source_dir/.peer-commit" 2>/dev/null || echo unknown)"
  # shellcheck disable=SC2086  # $isa_flags is a list of words
  { echo "source: $source_dir (commit $commit), ISA class $isa_class:" $isa_flags ${extra_cflags:+CFLAGS=\"$extra_cflags\"}
    CFLAGS="$extra_cflags" CXXFLAGS="$extra_cflags" \
    cmake -S "$source_dir" -B "$build" -DCMAKE_BUILD_TYPE=Release $isa_flags -DGGML_OPENMP=ON \
          -DGGML_IQK_MUL_MAT=ON -DGGML_IQK_FLASH_ATTENTION=ON -DGGML_IQK_FA_ALL_QUANTS=OFF \
          -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=OFF &&
    cmake --build "$build" -j "$jobs" --target llama-bench; } >"$log" 2>&1 ||
    { tail -n 40 "$log" >&2; echo "peer_ik_llama.sh: the ik_llama.cpp build failed; its log is $log" >&2; exit 1; }
  echo "$commit" >"$build/.peer-commit"  # this build's commit: the shared source may be re-exported later
fi
[ "$build_only" = 1 ] && { echo "$bench"; exit 0; }
for flag in $cpu_flags; do
  grep -m1 '^flags' /proc/cpuinfo | grep -qw -- "$flag" ||
    { echo "peer_ik_llama.sh: this CPU lacks $flag, which ISA class $isa_class needs" >&2; exit 1; }
done
[ -n "$model" ] || model="$("$root/scripts/fetch_model.sh")"
"$bench" -m "$model" -t "$threads" -p 0 -n 128 -r 5 -rtr 1 -o json
