#include "jit/cuda/cuda_source.hpp"
#include "jit/cuda/cuda_source_writer.hpp"

namespace qjit::jit::cuda {

namespace {

const char* const kSupportKernels = R"(
extern "C" __global__ void qjit_gather_rows(const u16* __restrict__ x, int ldx, const int* __restrict__ order,
                                            u16* __restrict__ out, int m, int k, int kp) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= (long long)m * kp) return;
    const int row = int(i / kp), j = int(i % kp);
    out[i] = j < k ? x[(long long)row * ldx + (order ? order[j] : j)] : u16(0);
}
extern "C" __global__ void qjit_cast_f32_to_f16(const float* __restrict__ in, u16* __restrict__ out, long long count) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < count) out[i] = float_to_f16(in[i]);
}
extern "C" __global__ void qjit_cast_f32_to_bf16(const float* __restrict__ in, u16* __restrict__ out, long long count) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < count) out[i] = float_to_bf16(in[i]);
}

// The compensator pass (runtime/cuda/cuda_low_rank.hpp), once per activation type.
template <bool BF16> static __device__ __forceinline__ float to_float(u16 v) {
    return BF16 ? __uint_as_float(u32(v) << 16) : half_to_float(v);
}
template <bool BF16> static __device__ __forceinline__ u16 from_float(float f) {
    return BF16 ? float_to_bf16(f) : float_to_f16(f);
}
// t[i][j] *= scales[j], t: m x cols.
template <bool BF16> static __device__ void scale_columns(u16* t, const float* scales, int m, int cols) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m * cols) t[i] = from_float<BF16>(to_float<BF16>(t[i]) * scales[i % cols]);
}
// y[i] += p[i], rounded once.
template <bool BF16> static __device__ void add_into(u16* y, const u16* p, long long count) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < count) y[i] = from_float<BF16>(to_float<BF16>(y[i]) + to_float<BF16>(p[i]));
}
// fp16 factors, t (m x rank, fp32) = x (m x k) U, with U stored transposed (rank x k, fp16): one
// warp per (row, component), lanes strided over k, a shuffle reduction.
template <bool BF16> static __device__ void x_times_u(const u16* x, const u16* ut, float* t, int m, int k, int rank) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= m * rank) return;  // whole warps leave together
    const int row = warp / rank, component = warp % rank;
    const u16* xr = x + (long long)row * k;
    const u16* ur = ut + (long long)component * k;
    float sum = 0.f;
    for (int i = lane; i < k; i += 32) sum += to_float<BF16>(xr[i]) * half_to_float(ur[i]);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) t[warp] = sum;
}
// fp16 factors, y (m x n) += t (m x rank, fp32) V (rank x n, fp16): one thread per output.
template <bool BF16> static __device__ void add_t_times_v(const float* t, const u16* v, u16* y, int m, int n, int rank) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= (long long)m * n) return;
    const int row = int(i / n), column = int(i % n);
    float sum = to_float<BF16>(y[i]);
    for (int j = 0; j < rank; ++j) sum += t[row * rank + j] * half_to_float(v[(long long)j * n + column]);
    y[i] = from_float<BF16>(sum);
}
#define QJIT_LOW_RANK_KERNELS(SUFFIX, BF16)                                                                          \
    extern "C" __global__ void qjit_scale_columns_##SUFFIX(u16* t, const float* scales, int m, int cols) {          \
        scale_columns<BF16>(t, scales, m, cols);                                                                     \
    }                                                                                                                \
    extern "C" __global__ void qjit_add_into_##SUFFIX(u16* y, const u16* p, long long count) {                      \
        add_into<BF16>(y, p, count);                                                                                 \
    }                                                                                                                \
    extern "C" __global__ void qjit_low_rank_xu_##SUFFIX(const u16* x, const u16* ut, float* t, int m, int k,       \
                                                         int rank) {                                                 \
        x_times_u<BF16>(x, ut, t, m, k, rank);                                                                       \
    }                                                                                                                \
    extern "C" __global__ void qjit_low_rank_tv_##SUFFIX(const float* t, const u16* v, u16* y, int m, int n,         \
                                                         int rank) {                                                 \
        add_t_times_v<BF16>(t, v, y, m, n, rank);                                                                    \
    }
QJIT_LOW_RANK_KERNELS(f16, false)
QJIT_LOW_RANK_KERNELS(bf16, true)

// The MLP's activations (base/activations.hpp's formulas, in fp32), in place on the up projection
// h: SwiGLU h[i] = silu(gate[i]) * h[i], GELU h[i] = gelu(h[i]), each rounded once.
template <bool BF16> static __device__ void swiglu(u16* h, const u16* gate, long long count) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= count) return;
    const float g = to_float<BF16>(gate[i]);
    h[i] = from_float<BF16>(g * (1.0f / (1.0f + expf(-g))) * to_float<BF16>(h[i]));
}
template <bool BF16> static __device__ void gelu(u16* h, long long count) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= count) return;
    const float v = to_float<BF16>(h[i]);
    h[i] = from_float<BF16>(0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))));
}
#define QJIT_MLP_ACTIVATIONS(SUFFIX, BF16)                                                                           \
    extern "C" __global__ void qjit_swiglu_##SUFFIX(u16* h, const u16* gate, long long count) {                     \
        swiglu<BF16>(h, gate, count);                                                                                \
    }                                                                                                                \
    extern "C" __global__ void qjit_gelu_##SUFFIX(u16* h, long long count) { gelu<BF16>(h, count); }
QJIT_MLP_ACTIVATIONS(f16, false)
QJIT_MLP_ACTIVATIONS(bf16, true)
)";

}  // namespace

std::string support_kernels_source() { return std::string(kPrelude) + kSupportKernels; }

}  // namespace qjit::jit::cuda
