#!/usr/bin/env bash
# Run on a GPU machine from the repository root, with BUILD_DIR-carry made by scripts/gpu_carry.sh
# where qjit was built: the steps named on the command line, in that order, within a time budget,
# each one's output in <step>.log inside $OUT/gpu-logs.tgz (or ./gpu-out; remade after every step,
# since the device tool brings back only a few files), and the cubin cache in gpu-cubins.tgz. The
# tests run as qjit_tests itself, not through ctest, whose files name the building machine's paths
# and CMake modules.
#
# Usage: [QJIT_BUILD_DIR=build-carry] [QJIT_GPU_BUDGET_S=540] [OUT=folder] scripts/gpu_bench.sh STEP...
# Steps, most valuable first:
#   tests     every CUDA device test (qjit_tests; the compile-only tests and the host emulation, which
#             reads the source tree, left out) in $QJIT_TEST_SHARDS (12) processes at once: 229 s on
#             an H200 with a cold cubin cache, most of it NVRTC
#   tiles     the device tests of the prefill tiles (128 and 256 rows) and of split-K at every batch
#   shard     the device tests of tensor-parallel shards and MLPs alone
#   nccl      the NCCL adapter on the device (one rank) with a tensor-parallel MLP
#   b70       bench_cuda: Llama-2-70B layers, batches 1/16/64, 4 and 3 bits
#   peer      bench/peer_torch.py: cuBLAS fp16/bf16 and PyTorch's int4 kernel, same shapes and batches
#   b7        bench_cuda: Llama-2-7B layers, batches 1/4/16/64, 4 and 3 bits, rank-16 INT8 and 2/4/16
#   prefill   bench_cuda: batches 64/128/256/512, 4 bits, both models, tuned within 3 s each
#   tilings   bench_cuda --tilings: candidate prefill tilings forced, Llama-2-7B, batches 128 and 512
#   tuner     bench_cuda --tuner-check on Llama-2-7B, batches 1/16/64, 4 bits
# A step that would start with less than a minute of budget left is skipped; a running step is
# stopped when the budget ends. A carried gpu-cubins.tgz seeds the cubin cache. Exits nonzero when
# any step failed.
set -uo pipefail
build="$(cd "${QJIT_BUILD_DIR:-build-carry}" && pwd)"
out="${OUT:-gpu-out}"
logs="$(mktemp -d)"
mkdir -p "$out"
deadline=$(( $(date +%s) + ${QJIT_GPU_BUDGET_S:-540} ))
# NCCL from the machine's Python wheel (nvidia-nccl-cu13), where it has one.
nccl_lib="$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)"
export LD_LIBRARY_PATH="$build:$build/adapters:$build/carried-libs${nccl_lib:+:$nccl_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export QJIT_CUBIN_CACHE=/tmp/qjit-cubins
mkdir -p "$QJIT_CUBIN_CACHE"
[ -f gpu-cubins.tgz ] && tar -xzf gpu-cubins.tgz -C "$QJIT_CUBIN_CACHE"

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
if ldd "$build/bench/bench_cuda" | grep 'not found'; then
  echo "gpu_bench: missing shared libraries above (CUDA's come from this machine, the rest from gpu_carry.sh)" >&2
fi

bench="$build/bench/bench_cuda"
# The prefill tilings `tilings` times: the old 64-row tile, then 128 and 256 rows in warp grids.
prefill_tilings="kernel=gemm,bm=64,bn=128,bk=128,warps=8,wm=1,stages=3"
for tiling in bm=64,bn=128,bk=64,warps=8,wm=2,stages=4 bm=128,bn=128,bk=64,warps=8,wm=2,stages=3 \
    bm=128,bn=128,bk=64,warps=8,wm=4,stages=4 bm=128,bn=64,bk=128,warps=4,wm=2,stages=4 \
    bm=128,bn=256,bk=64,warps=8,wm=2,stages=3 bm=128,bn=128,bk=64,warps=4,wm=2,stages=5 \
    bm=256,bn=128,bk=64,warps=8,wm=4,stages=3 bm=128,bn=64,bk=128,warps=4,wm=2,stages=4,splitk=2; do
  prefill_tilings+=";kernel=gemm,$tiling"
done
step_command() {
  case "$1" in
    tests) echo scripts/gpu_test_shards.sh "${QJIT_TEST_SHARDS:-12}" "$logs/tests" "$build/tests/qjit_tests" \
          --gtest_filter='*Cuda*:-*CompileSweep*:*CudaCompile.*:*CudaEmulated*' ;;
    tiles) echo "$build/tests/qjit_tests" --gtest_filter='CudaDevice.PrefillTiles*:CudaDevice.SplitKAndEveryBatch' ;;
    shard) echo "$build/tests/qjit_tests" --gtest_filter='CudaDevice.Shard*:CudaDevice.TensorParallel*' ;;
    nccl) echo "$build/tests/qjit_nccl_tests" ;;
    b70) echo "$bench" --shapes llama70b --batches 1,16,64 --bits 4,3 --budget 1000 --reps 30 ;;
    peer) echo python3 bench/peer_torch.py --shapes llama7b,llama70b --batches 1,16,64,128,256,512 --reps 30 ;;
    b7) echo "$bench" --shapes llama7b --batches 1,4,16,64 --bits 4,3 --budget 1000 --reps 30 --low-rank 16 \
          --low-rank-bits 8 --mixed ;;
    prefill) echo "$bench" --shapes llama7b,llama70b --batches 64,128,256,512 --bits 4 --budget 3000 --reps 20 ;;
    tilings) echo "$bench" --shapes llama7b --batches 128,512 --bits 4 --reps 20 --tilings $prefill_tilings ;;  # no spaces: one word
    tuner) echo "$bench" --tuner-check --shapes llama7b --batches 1,16,64 --bits 4 --budget 1000 --reps 20 ;;
    *) return 1 ;;
  esac
}

status=0
for step in "$@"; do
  command="$(step_command "$step")" || { echo "gpu_bench: unknown step $step" >&2; status=2; continue; }
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 60 ]; then echo "gpu_bench: $step skipped, ${left}s of the budget left"; continue; fi
  echo "== $step ($left s left): $command"
  started=$(date +%s)
  timeout --kill-after=5 $(( left - 20 )) $command > "$logs/$step.log" 2>&1
  code=$?
  tail -n 40 "$logs/$step.log"
  tar -czf "$out/gpu-logs.tgz" -C "$logs" .
  echo "== $step: exit $code after $(( $(date +%s) - started )) s"
  [ "$code" -eq 0 ] || status=1
done
tar -czf "$out/gpu-cubins.tgz" -C "$QJIT_CUBIN_CACHE" . && ls -la "$out/gpu-cubins.tgz"
exit "$status"
