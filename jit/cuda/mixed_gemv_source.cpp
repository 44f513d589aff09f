#include "jit/cuda/cuda_source_writer.hpp"

#include <vector>

#include "format/cuda_code_layout.hpp"

namespace qjit::jit::cuda {

using namespace cuda_layout;

namespace {

const char* const kMixedGemvKernel = R"(
// Parameters: the codes ([np][column words], each group's blocks at its width), the first word of
// each group in a column ([num_groups + 1]); the scales: fp16 or fp32 [num_groups][np], or
// second-order codes [num_groups][np] with an fp16 scale and zero per 16 columns
// [num_groups][np / 16]; zero points [num_groups][np] (asymmetric); outliers by column (start
// [n + 1], storage rows and fp16 values); then as the other GEMV.
extern "C" __global__ void __launch_bounds__(256) qjit_mixed_gemv(
    const u32* __restrict__ codes, const int* __restrict__ group_words, const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ scale_codes, const u16* __restrict__ scale2, const u16* __restrict__ zero2,
    const unsigned char* __restrict__ zeros, const int* __restrict__ outlier_start,
    const int* __restrict__ outlier_rows, const u16* __restrict__ outlier_values, const u16* __restrict__ x,
    u16* __restrict__ y, int m, int n, int np, int k_valid, int ldx, int num_groups) {
    const int lane = threadIdx.x & 31;
    const int col = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (col >= n) return;  // whole warps only: the shuffles below need all 32 lanes
    const u32* column = codes + (long long)col * group_words[num_groups];
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
    for (int b = lane; b < num_groups * BLOCKS_PER_GROUP; b += 32) {
        const int g = b / BLOCKS_PER_GROUP;
        const int width = (group_words[g + 1] - group_words[g]) / BLOCKS_PER_GROUP;
        const u32* w = column + group_words[g] + b % BLOCKS_PER_GROUP * width;
        const int meta = g * np + col;
        float scale;
        if (SECOND_ORDER) {
            const int second = g * (np / 16) + col / 16;  // in this order: the CPU's fp32 value, bit for bit
            scale = half_to_float(scale2[second]) * (float(scale_codes[meta]) - half_to_float(zero2[second]));
        } else {
            scale = scale_value(static_cast<const scale_t*>(scales_raw)[meta]);
        }
        const u32 zero = SYMMETRIC ? 1u << (width - 1) : zeros[meta];
        const u32 bias = (0x6400u + zero) | (0x6400u + zero) << 16;
        const int k = b * 32;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (r >= m) break;
            u32 xs[16];
            block_activations(x, r, k, k_valid, ldx, xs);
            acc[r] += block_dot_any(width, w, bias, scale, xs);
        }
    }
    if (OUTLIERS)  // in fp32, beside the product: W's outliers times their activations
        for (int i = outlier_start[col] + lane; i < outlier_start[col + 1]; i += 32) {
            const int row = outlier_rows[i];
            const float value = half_to_float(outlier_values[i]);
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
                if (r < m) acc[r] += value * activation_value(x[(long long)r * ldx + row]);
        }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float v = acc[r];
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0 && r < m) y[(long long)r * n + col] = to_output(v);
    }
}
)";

}  // namespace

// The GEMV of the formats with parts the other kernels lack: K-groups of mixed widths (2 and 4
// bits), second-order scales, sparse outliers. One warp per column, lanes strided over the
// column's 32-code blocks; each block's width, scale and zero point come from its group.
std::string CudaSourceWriter::mixed_gemv() {
    const WeightFormat& f = spec_.format;
    std::vector<int> widths{f.bits};
    if (!f.uniform_bits()) widths = {2, 4};
    out_ << "// " << kernel_name(spec_) << ": y = x * W for up to " << spec_.rows
         << " rows; K-groups of their own width, scales and outliers.\n"
         << kPrelude;
    constants();
    out_ << "constexpr int ROWS = " << spec_.rows << ";\n"
         << "constexpr int BLOCKS_PER_GROUP = " << f.group_size / kCodesPerBlock << ";  // 32-code blocks per K-group\n"
         << "constexpr bool SECOND_ORDER = " << (f.second_order_scales() ? "true" : "false") << ";\n"
         << "constexpr bool OUTLIERS = " << (f.outliers > 0 ? "true" : "false") << ";\n";
    for (int bits : widths) decode_block(bits, "decode_block_" + std::to_string(bits));
    dequantize_helpers();
    for (int bits : widths) block_dot("block_dot_" + std::to_string(bits), "decode_block_" + std::to_string(bits));
    block_activations();
    out_ << "static __device__ __forceinline__ float block_dot_any(int width, const u32* w, u32 bias, float scale,\n"
         << "                                                    const u32 (&x)[16]) {\n";
    if (widths.size() == 1) out_ << "    return block_dot_" << widths[0] << "(w, bias, scale, 0.f, x);\n}\n";
    else out_ << "    return width == 2 ? block_dot_2(w, bias, scale, 0.f, x) : block_dot_4(w, bias, scale, 0.f, x);\n}\n";
    out_ << kMixedGemvKernel;
    return out_.str();
}

}  // namespace qjit::jit::cuda
