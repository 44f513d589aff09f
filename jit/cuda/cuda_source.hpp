// CUDA C++ source for one kernel spec, ready for NVRTC. The source is self-contained (no
// #include: fp16/bf16 arithmetic, cp.async, ldmatrix and mma are inline PTX), so it compiles
// without the toolkit's headers.
//
// Kernel parameters, in order (u16 = fp16 or bf16 bits, as the spec's activation type):
//   GEMV:  const u32* codes, const void* scales, const u16* zeros, const u16* x, u16* y,
//          int m, int n, int np, int k_valid, int ldx, int kp, int num_groups
//   GEMM:  the same, then float* partial (m x n, zeroed; used when gridDim.z > 1), int k_tiles_per_split
// codes/scales/zeros: format/cuda_weights.hpp's layout (np columns, kp rows); x: m rows of ldx
// elements (a multiple of 8, 16-byte aligned), zero beyond k_valid (a multiple of 8) by masking;
// y: m x n. Launch: GEMV blocks of tiling.warps * 32 threads, ceil(n / (warps * cols)) blocks;
// GEMM blocks of warps * 32 threads, grid (np / bn, ceil(m / bm), split_k), shared_bytes dynamic.
#pragma once

#include <string>

#include "jit/cuda/cuda_tiling.hpp"

namespace qjit::jit::cuda {

struct GeneratedKernel {
    std::string name;        // kernel_name(spec)
    std::string entry;       // the __global__ function to look up in the module
    std::string source;
    unsigned threads = 0;    // per block
    int shared_bytes = 0;    // dynamic shared memory per block
};

// Throws an Error (check_spec) for a spec the generator cannot emit. The source
// does not depend on split_k (a launch-time choice), so those variants share one compile.
GeneratedKernel generate_kernel(const CudaKernelSpec& spec);

// Small kernels every layer uses, in one module per architecture:
//   qjit_gather_rows(const u16* x, int ldx, const int* order, u16* out, int m, int k, int kp):
//     out[r][j] = j < k ? x[r][order ? order[j] : j] : 0   (act-order and padding; one thread per element)
//   qjit_cast_f32_to_f16 / qjit_cast_f32_to_bf16(const float* in, u16* out, long long count)
// and the low-rank compensator's (runtime/cuda/cuda_low_rank.hpp), each as _f16 and _bf16:
//   qjit_scale_columns_*(u16* t, const float* scales, int m, int cols):   t[i][j] *= scales[j]
//   qjit_add_into_*(u16* y, const u16* p, long long count):                y[i] += p[i]
//   qjit_low_rank_xu_*(const u16* x, const u16* ut, float* t, int m, int k, int rank):
//     t (fp32) = x U, U given transposed (rank x k, fp16); one warp per element of t
//   qjit_low_rank_tv_*(const float* t, const u16* v, u16* y, int m, int n, int rank):
//     y += t V, V rank x n in fp16; one thread per element of y
// and a tensor-parallel MLP's activations (runtime/tp_mlp_cuda.cpp), each as _f16 and _bf16:
//   qjit_swiglu_*(u16* h, const u16* gate, long long count):   h[i] = silu(gate[i]) * h[i]
//   qjit_gelu_*(u16* h, long long count):                      h[i] = gelu(h[i]) (tanh approximation)
std::string support_kernels_source();

}  // namespace qjit::jit::cuda
