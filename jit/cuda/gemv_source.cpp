#include "jit/cuda/cuda_source_writer.hpp"

namespace qjit::jit::cuda {

namespace {

const char* const kGemvKernel = R"(
extern "C" __global__ void __launch_bounds__(256) qjit_gemv(
    const u32* __restrict__ codes, const void* __restrict__ scales_raw, const void* __restrict__ zeros_raw,
    const u16* __restrict__ x, u16* __restrict__ y, int m, int n, int np, int k_valid, int ldx, int kp,
    int num_groups) {
    const int lane = threadIdx.x & 31;
    const int col0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * COLS;
    if (col0 >= n) return;  // whole warps only: the shuffles below need all 32 lanes
    const int column_words = kp / 32 * BITS;
    const int chunks = kp / CHUNK_CODES;
    float acc[COLS][ROWS];
#pragma unroll
    for (int j = 0; j < COLS; ++j)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[j][r] = 0.f;

    for (int c0 = lane; c0 < chunks; c0 += 32 * IN_FLIGHT) {
        // Issue every load of this round (codes, then their scales and zero points or offsets) before any use.
        u32 q[IN_FLIGHT][COLS][CHUNK_WORDS];
        float scale[IN_FLIGHT][COLS][CHUNK_BLOCKS];
        u32 bias[IN_FLIGHT][COLS][CHUNK_BLOCKS];
        float offset[IN_FLIGHT][COLS][CHUNK_BLOCKS];
#pragma unroll
        for (int f = 0; f < IN_FLIGHT; ++f) {
            const int c = min(c0 + 32 * f, chunks - 1);  // a clamped duplicate is loaded but not used
#pragma unroll
            for (int j = 0; j < COLS; ++j) {
                const u32* src = codes + (long long)(col0 + j) * column_words + (long long)c * CHUNK_WORDS;
#pragma unroll
                for (int v = 0; v < CHUNK_WORDS / 4; ++v) {
                    const uint4 words = load_stream(src + 4 * v);
                    q[f][j][4 * v] = words.x, q[f][j][4 * v + 1] = words.y;
                    q[f][j][4 * v + 2] = words.z, q[f][j][4 * v + 3] = words.w;
                }
#pragma unroll
                for (int b = 0; b < CHUNK_BLOCKS; ++b) {
                    const int group = group_of(c * CHUNK_CODES + b * 32, num_groups), col = col0 + j;
                    const int supers = num_groups / GROUPS_PER_SUPER, super = group / GROUPS_PER_SUPER;
                    scale[f][j][b] = group_scale(scales_raw, group, col, np, supers, super);
                    bias[f][j][b] = zero_bias(zeros_raw, group * np + col);
                    offset[f][j][b] = group_offset(zeros_raw, group, col, np, supers, super);
                }
            }
        }
#pragma unroll
        for (int f = 0; f < IN_FLIGHT; ++f) {
            const int c = c0 + 32 * f;
            if (c >= chunks) break;
#pragma unroll
            for (int b = 0; b < CHUNK_BLOCKS; ++b) {
                const int k = c * CHUNK_CODES + b * 32;
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    if (r >= m) break;
                    u32 xs[16];
                    block_activations(x, r, k, k_valid, ldx, xs);
#pragma unroll
                    for (int j = 0; j < COLS; ++j)
                        acc[j][r] += block_dot(&q[f][j][b * BITS], bias[f][j][b], scale[f][j][b],
                                              offset[f][j][b], xs);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < COLS; ++j)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float v = acc[j][r];
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
            if (lane == 0 && r < m && col0 + j < n) y[(long long)r * n + col0 + j] = to_output(v);
        }
}
)";

}  // namespace

std::string CudaSourceWriter::gemv() {
    const CudaTiling& t = spec_.tiling;
    const int blocks = chunk_blocks(spec_.format.bits);
    out_ << "// " << kernel_name(spec_) << ": y = x * W for up to " << spec_.rows
         << " rows; one warp per column set, lanes stride over K, shuffle reduction.\n"
         << kPrelude;
    constants();
    out_ << "constexpr int ROWS = " << spec_.rows << ";\n"
         << "constexpr int COLS = " << t.columns_per_warp << ";\n"
         << "constexpr int IN_FLIGHT = " << t.chunks_in_flight << ";\n"
         << "constexpr int CHUNK_BLOCKS = " << blocks << ";  // 32-code blocks per 16-byte-aligned chunk\n"
         << "constexpr int CHUNK_WORDS = CHUNK_BLOCKS * BITS;\n"
         << "constexpr int CHUNK_CODES = CHUNK_BLOCKS * 32;\n";
    decode_block();
    dequantize_helpers();
    block_dot("block_dot", "decode_block");
    block_activations();
    out_ << kGemvKernel;
    return out_.str();
}

}  // namespace qjit::jit::cuda
