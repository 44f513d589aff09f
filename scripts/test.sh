#!/usr/bin/env bash
# Builds qjit and runs the whole test suite. QJIT_SANITIZE=1 builds and runs it under clang's
# AddressSanitizer + UndefinedBehaviorSanitizer instead (in build-sanitize/, scripts/build_sanitized.sh:
# the build the fuzz targets share), QJIT_SANITIZE=gcc under GCC's (in build-sanitize-gcc/); QJIT_SANITIZE=thread
# under ThreadSanitizer (in build-tsan/), with the suites whose code runs on more than one thread
# only (-DQJIT_TESTS=threaded, tests/CMakeLists.txt), less those that repeat one check per ISA
# (Isa/: minutes under TSan, and nothing the rest does not already run on the thread pool), and the
# model-scale numerics in those suites (NLL on the real models, the tune-then-create round trip of a
# checkpoint, tuning a GGUF file with the probes, the sparse products' sweep over every format, the
# calibration's rank search, qjit-run's text modes on SmolLM2): minutes under TSan, on the same pool
# the layer suites run.
# The ASan builds compile the suites' own code without the sanitizers (tests/CMakeLists.txt).
# Under ASan + UBSan the format variants keep their portable run and their AVX-512 VNNI one: the
# AVX2, AVX-512 exact and AVX-512 int8-without-VNNI twins (AllFormats/*_avx2_*,
# AllFormats/*_avx512_(int8|f32): about a fifth of that run on an AVX-512 machine; other suites run
# those paths sanitized) are left out, and so are the JIT
# runs of the per-ISA model checks (Isa/*/avx*, Isa/*/Jit: their portable runs stay) and the NVRTC
# compile sweep (BitsAndArch/): generated machine code and NVRTC are not
# instrumented, and the C++ around them is the same for every ISA (the plain run keeps them all);
# and so are the quantizers' quality checks on the real model (int8 NLL, MiLo/HQQ/GPTQ against
# RTN on stories260K; Gemma 3's NLL on 200 sequences and its fp32 references), and qjit-run's text
# modes on SmolLM2 (text_cli, which quantizes the whole model twice): numerics over more data through
# code the smaller tests run sanitized.
# The ASan run leaves out the CUDA kernels' host emulation (CudaEmulated*): the kernels run there
# as uninstrumented libraries built at test time, on fibers ASan does not follow.
# The sanitizer builds leave out the benchmarks, which no test runs, and the runs under mpirun
# (label mpi): Open MPI's own allocations and threads are not the project's to sanitize, and the
# tensor-parallel logic they exercise runs sanitized in tests/test_tp_mlp.cpp, ranks as threads.
# The full NVRTC sweep of every CUDA variant (label cuda_sweep) is left out; run it with
#   ctest --test-dir build -L cuda_sweep -j 2
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exclude=()
labels_out='cuda_sweep'
case "${QJIT_SANITIZE:-0}" in
  1|gcc)
    if [ "$QJIT_SANITIZE" = gcc ]; then
      build_dir="$root/build-sanitize-gcc"
      "$root/scripts/build.sh" --quiet "$build_dir" -DQJIT_SANITIZE=ON -DQJIT_BUILD_BENCH=OFF
    else
      build_dir="$root/build-sanitize"
      "$root/scripts/build_sanitized.sh"
    fi
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    labels_out='cuda_sweep|mpi'
    exclude=(-E '^BitsAndArch/|^AllFormats/.*_avx2_|^AllFormats/.*_avx512_(int8|f32)|^Isa/.*/(avx|Jit)|CudaEmulated|Int8WeightsMeanNll|RealModel[.]Milo|RealModel[.]Gptq|RealModel[.]Hqq|^Gemma3[.](Nll|ExactImport|SlidingWindow)|^text_cli$')
    ;;
  thread)
    build_dir="$root/build-tsan"
    "$root/scripts/build.sh" --quiet "$build_dir" -DQJIT_TSAN=ON -DQJIT_BUILD_BENCH=OFF -DQJIT_TESTS=threaded
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp"
    exclude=(-E '^Isa/|^layering_|^install_and_consume$|RealModel|^SmolLM2\.|^text_cli$|^checkpoint_tuned_then_created|^TuneDriver\.(TunesEach|IsaCaps)|^SparseProductJit\.MatchesTheOracleOnEveryFormat$|^CApiCalibration\.RankWithinBudget$')
    labels_out='cuda_sweep|mpi'
    ;;
  *)
    build_dir="$root/build"
    "$root/scripts/build.sh" --quiet "$build_dir"
    ;;
esac
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" -LE "$labels_out" "${exclude[@]}"
