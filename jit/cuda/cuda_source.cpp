#include "jit/cuda/cuda_source.hpp"
#include "base/error.hpp"

#include <sstream>

#include "format/cuda_code_layout.hpp"

namespace qjit::jit::cuda {

using namespace cuda_layout;

namespace {

// Types and PTX wrappers every generated kernel starts with. fp16 pairs travel as u32 (half2
// bits); the 0x6400 trick: fp16 bits 0x6400 | c are the number 1024 + c for c < 1024.
// Every inline PTX statement sits in a helper behind #ifndef QJIT_HOST_EMULATION: the tests'
// host emulation (tests/cuda_host/) compiles the same source as C++ with its own helpers.
const char* const kPrelude = R"(#pragma nv_diag_suppress 177  // helpers a kernel does not use
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#ifndef QJIT_HOST_EMULATION
#define QJIT_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
static __device__ __forceinline__ u32 and_or(u32 a, u32 b, u32 c) {  // (a & b) | c
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
static __device__ __forceinline__ u32 hsub2(u32 a, u32 b) {
    u32 d;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
static __device__ __forceinline__ u32 hmul2(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
static __device__ __forceinline__ u32 hfma2(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
static __device__ __forceinline__ float half_to_float(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
static __device__ __forceinline__ u16 float_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
static __device__ __forceinline__ u16 float_to_bf16(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
static __device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// Streams code words past L1: each is read once per forward.
static __device__ __forceinline__ uint4 load_stream(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
#endif
static __device__ __forceinline__ float lo_f16(u32 v) { return half_to_float(u16(v)); }
static __device__ __forceinline__ float hi_f16(u32 v) { return half_to_float(u16(v >> 16)); }
static __device__ __forceinline__ float lo_bf16(u32 v) { return __uint_as_float(v << 16); }
static __device__ __forceinline__ float hi_bf16(u32 v) { return __uint_as_float(v & 0xffff0000u); }
)";

const char* const kAsyncCopy = R"(
#ifndef QJIT_HOST_EMULATION
static __device__ __forceinline__ u32 shared_address(const void* p) {
    return u32(__cvta_generic_to_shared(p));
}
// Copies 16 bytes, or zero-fills them when `valid` is false (the source is not read then).
static __device__ __forceinline__ void copy_async_16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(shared_address(dst)), "l"(src), "r"(valid ? 16 : 0));
}
static __device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;"); }
template <int Pending>
static __device__ __forceinline__ void wait_async() { asm volatile("cp.async.wait_group %0;" :: "n"(Pending)); }
static __device__ __forceinline__ void load_matrix_x4(u32 (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(shared_address(p)));
}
#endif
)";

class SourceWriter {
public:
    explicit SourceWriter(const CudaKernelSpec& spec) : spec_(spec) {}

    std::string gemv();
    std::string gemm();
    std::string mma();
    std::string mixed_gemv();

private:
    bool f16() const { return spec_.activations == ActivationType::F16; }
    void constants();
    void decode_block() { decode_block(spec_.format.bits, "decode_block"); }
    void decode_block(int bits, const std::string& name);
    void block_dot(const std::string& name, const std::string& decoder);
    void block_activations();
    void dequantize_helpers();
    void mma_instruction();

    const CudaKernelSpec& spec_;
    TextStream out_;
};

// Format constants shared by both kernels.
void SourceWriter::constants() {
    out_ << "constexpr int BITS = " << spec_.format.bits << ";\n"
         << "constexpr int GROUP = " << (spec_.per_column() ? 0 : spec_.format.group_size) << ";  // 0: one group per column\n"
         << "constexpr bool SYMMETRIC = " << (spec_.format.symmetric ? "true" : "false") << ";\n"
         << "typedef " << (spec_.format.f16_scales() ? "u16" : "float") << " scale_t;\n"
         << "constexpr u32 SYMMETRIC_BIAS = " << (0x6400 + (1 << (spec_.format.bits - 1))) << "u;  // fp16 bits of 1024 + 2^(bits-1)\n"
         << "static __device__ __forceinline__ int group_of(int k, int num_groups) {\n"
         << "    return GROUP == 0 ? 0 : min(k / (GROUP == 0 ? 1 : GROUP), num_groups - 1);\n}\n"
         << "static __device__ __forceinline__ float scale_value(scale_t s) { return "
         << (spec_.format.f16_scales() ? "half_to_float(s)" : "s") << "; }\n";
}

// name(w, h): the 16 pairs of a 32-code block of `bits` as fp16 pairs (1024 + code), per code_layout.hpp.
void SourceWriter::decode_block(int bits, const std::string& name) {
    const int mask = (1 << bits) - 1;
    out_ << "static __device__ __forceinline__ void " << name << "(const u32* w, u32 (&h)[16]) {\n";
    for (int p = 0; p < regular_pairs(bits); ++p) {
        const int shift = pair_shift(bits, p);
        out_ << "    h[" << p << "] = and_or(w[" << pair_word(bits, p) << "]";
        if (shift) out_ << " >> " << shift;
        out_ << ", 0x" << std::hex << (mask | mask << 16) << "u, 0x64006400u);\n" << std::dec;
    }
    if (bits == 3) {
        out_ << "    u32 spare = 0x64006400u;\n";
        for (int i = 0; i < 2; ++i)
            for (int b = 0; b < 3; ++b)
                out_ << "    spare |= ((w[" << kSpareWord[i][b] << "] >> " << kSpareBit[i][b] << ") & 1u) << "
                     << (16 * i + b) << ";\n";
        out_ << "    h[15] = spare;\n";
    }
    out_ << "}\n";
}

// Pair dequantization: the exact integers code - zero (fp16 arithmetic on numbers below 2048
// is exact), times the scale in fp16 (as an fp16 model's weight) or fp32 (bf16 path).
void SourceWriter::dequantize_helpers() {
    out_ << R"(static __device__ __forceinline__ u32 zero_bias(const u16* zeros, int index) {
    const u32 bias = SYMMETRIC ? SYMMETRIC_BIAS : 0x6400u + zeros[index];
    return bias | bias << 16;
}
)";
    if (f16())
        out_ << R"(// Two fp16 weights (code - zero) * scale from a decoded pair.
static __device__ __forceinline__ u32 dequantize_pair(u32 h, u32 bias, u32 scale2) {
    return hmul2(hsub2(h, bias), scale2);
}
static __device__ __forceinline__ u32 scale_pair(float s) { const u32 h = float_to_f16(s); return h | h << 16; }
static __device__ __forceinline__ u16 to_output(float v) { return float_to_f16(v); }
static __device__ __forceinline__ float activation_value(u16 v) { return half_to_float(v); }
)";
    else
        out_ << R"(// Two bf16 weights (code - zero) * scale from a decoded pair.
static __device__ __forceinline__ u32 dequantize_pair(u32 h, u32 bias, float scale) {
    const u32 d = hsub2(h, bias);
    return pack_bf16(lo_f16(d) * scale, hi_f16(d) * scale);
}
static __device__ __forceinline__ u16 to_output(float v) { return float_to_bf16(v); }
static __device__ __forceinline__ float activation_value(u16 v) { return __uint_as_float(u32(v) << 16); }
)";
}

// block_activations(x, r, k, k_valid, ldx, xs): x[r][k .. k + 31] as 16 pairs, zero from k_valid on.
void SourceWriter::block_activations() {
    out_ << R"(static __device__ __forceinline__ void block_activations(const u16* x, int r, int k, int k_valid, int ldx,
                                                         u32 (&xs)[16]) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
        uint4 xv = make_uint4(0, 0, 0, 0);
        if (k + 8 * v < k_valid) xv = *reinterpret_cast<const uint4*>(x + (long long)r * ldx + k + 8 * v);
        xs[4 * v] = xv.x, xs[4 * v + 1] = xv.y, xs[4 * v + 2] = xv.z, xs[4 * v + 3] = xv.w;
    }
}
)";
}

// name(w, bias, scale, x): the sum over a 32-code block (decoded by `decoder`) of x * w. fp16:
// fp16 products, two fp16 partial sums of 16 terms, an fp32 total; bf16: the exact (code - zero)
// times x in fp32, scaled once.
void SourceWriter::block_dot(const std::string& name, const std::string& decoder) {
    out_ << "static __device__ __forceinline__ float " << name
         << "(const u32* w, u32 bias, float scale, const u32 (&x)[16]) {\n"
         << "    u32 h[16];\n"
         << "    " << decoder << "(w, h);\n";
    if (f16())
        out_ << R"(    const u32 scale2 = scale_pair(scale);
    u32 sum0 = 0, sum1 = 0;
#pragma unroll
    for (int p = 0; p < 8; ++p) {
        sum0 = hfma2(dequantize_pair(h[p], bias, scale2), x[p], sum0);
        sum1 = hfma2(dequantize_pair(h[p + 8], bias, scale2), x[p + 8], sum1);
    }
    return (lo_f16(sum0) + hi_f16(sum0)) + (lo_f16(sum1) + hi_f16(sum1));
}
)";
    else
        out_ << R"(    float sum = 0.f;
#pragma unroll
    for (int p = 0; p < 16; ++p) {
        const u32 d = hsub2(h[p], bias);
        sum = fmaf(lo_f16(d), lo_bf16(x[p]), sum);
        sum = fmaf(hi_f16(d), hi_bf16(x[p]), sum);
    }
    return sum * scale;
}
)";
}

std::string SourceWriter::gemv() {
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
    out_ << R"(
extern "C" __global__ void __launch_bounds__(256) qjit_gemv(
    const u32* __restrict__ codes, const void* __restrict__ scales_raw, const u16* __restrict__ zeros,
    const u16* __restrict__ x, u16* __restrict__ y, int m, int n, int np, int k_valid, int ldx, int kp,
    int num_groups) {
    const scale_t* __restrict__ scales = static_cast<const scale_t*>(scales_raw);
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
        // Issue every load of this round (codes, then their scales and zero points) before any use.
        u32 q[IN_FLIGHT][COLS][CHUNK_WORDS];
        float scale[IN_FLIGHT][COLS][CHUNK_BLOCKS];
        u32 bias[IN_FLIGHT][COLS][CHUNK_BLOCKS];
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
                    const int meta = group_of(c * CHUNK_CODES + b * 32, num_groups) * np + col0 + j;
                    scale[f][j][b] = scale_value(scales[meta]);
                    bias[f][j][b] = zero_bias(zeros, meta);
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
                        acc[j][r] += block_dot(&q[f][j][b * BITS], bias[f][j][b], scale[f][j][b], xs);
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
    return out_.str();
}

// The GEMV of the formats with parts the other kernels lack: K-groups of mixed widths (2 and 4
// bits), second-order scales, sparse outliers. One warp per column, lanes strided over the
// column's 32-code blocks; each block's width, scale and zero point come from its group.
std::string SourceWriter::mixed_gemv() {
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
    if (widths.size() == 1) out_ << "    return block_dot_" << widths[0] << "(w, bias, scale, x);\n}\n";
    else out_ << "    return width == 2 ? block_dot_2(w, bias, scale, x) : block_dot_4(w, bias, scale, x);\n}\n";
    out_ << R"(
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
    return out_.str();
}

// mma(c, a, b0, b1): c += A (16x16, row) * B (16x8, col) in fp32, operands of the activation type.
void SourceWriter::mma_instruction() {
    const char* type = f16() ? "f16" : "bf16";
    out_ << "static __device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {\n"
         << "#ifndef QJIT_HOST_EMULATION\n"
         << "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32." << type << "." << type
         << ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"\n"
         << "                 : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
         << "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
         << "#else\n"
         << "    mma_m16n8k16_" << type << "(c, a, b0, b1);\n"
         << "#endif\n}\n";
}

std::string SourceWriter::mma() {
    const CudaTiling& t = spec_.tiling;
    out_ << "// " << kernel_name(spec_) << ": y = x * W for up to " << spec_.rows
         << " rows per block on tensor cores; fragment-ordered\n"
         << "// weights decoded straight into B registers; warps split K and meet in shared memory.\n"
         << kPrelude;
    constants();
    out_ << "constexpr int ROWS = " << spec_.rows << ", ROW_TILES = (ROWS + 15) / 16;\n"
         << "constexpr int WARPS = " << t.warps << ", THREADS = WARPS * 32;\n"
         << "constexpr int TILES = " << t.n_tiles << ";      // 8-column tiles per block\n"
         << "constexpr bool PREFETCH = " << (t.chunks_in_flight > 1 ? "true" : "false")
         << ";  // the next step's loads in flight during this step's math\n";
    decode_block();
    dequantize_helpers();
    mma_instruction();
    out_ << (f16() ? "static __device__ __forceinline__ u32 weight_scale(float s) { return scale_pair(s); }\n"
                   : "static __device__ __forceinline__ float weight_scale(float s) { return s; }\n");
    out_ << R"(
// This lane's 32-code block: BITS consecutive words, in the widest loads they allow.
static __device__ __forceinline__ void load_block(const u32* p, u32 (&w)[BITS]) {
    if (BITS % 4 == 0) {
#pragma unroll
        for (int v = 0; v < BITS / 4; ++v) {
            const uint4 q = __ldg(reinterpret_cast<const uint4*>(p) + v);
            w[4 * v] = q.x, w[4 * v + 1] = q.y, w[4 * v + 2] = q.z, w[4 * v + 3] = q.w;
        }
    } else if (BITS == 2) {
        const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
        w[0] = q.x, w[1 % BITS] = q.y;
    } else {
#pragma unroll
        for (int v = 0; v < BITS; ++v) w[v] = __ldg(p + v);
    }
}

// Eight activations x[row][k .. k + 7] (k a multiple of 8), or zeros outside the matrix.
static __device__ __forceinline__ uint4 activations8(const u16* x, int row, int k, int m, int k_valid, int ldx) {
    return row < m && k < k_valid ? __ldg(reinterpret_cast<const uint4*>(x + (long long)row * ldx + k))
                                  : make_uint4(0, 0, 0, 0);
}

extern "C" __global__ void __launch_bounds__(THREADS) qjit_mma(
    const u32* __restrict__ codes, const void* __restrict__ scales_raw, const u16* __restrict__ zeros,
    const u16* __restrict__ x, u16* __restrict__ y, int m, int n, int np, int k_valid, int ldx, int kp,
    int num_groups, float* __restrict__ partial, int steps_per_split) {
    const scale_t* __restrict__ scales = static_cast<const scale_t*>(scales_raw);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = lane & 3, g = lane >> 2;
    const int tile0 = blockIdx.x * TILES;
    const int steps = kp / 128;
    const int step_end = min(steps, (blockIdx.y + 1) * steps_per_split);
    // Blocks along z take successive ROWS-row slices of x and y.
    const int row_base = blockIdx.z * ROW_TILES * 16;
    x += (long long)row_base * ldx, y += (long long)row_base * n, m -= row_base;
    if (partial) partial += (long long)row_base * n;
    float c[ROW_TILES][TILES][4];
#pragma unroll
    for (int i = 0; i < ROW_TILES; ++i)
#pragma unroll
        for (int j = 0; j < TILES; ++j) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.f;

    // The lane's block of each tile at step s (rows 128s + 32t .. + 31 of column 8 * tile + g) and
    // its group's scale and zero point.
    u32 w[TILES][BITS];
    u32 bias[TILES];
    float scale[TILES];
    auto load_step = [&](int s) {
        const int group = group_of(s * 128 + 32 * t, num_groups);
#pragma unroll
        for (int j = 0; j < TILES; ++j) {
            load_block(codes + (((long long)(tile0 + j) * steps + s) * 32 + lane) * BITS, w[j]);
            const int meta = group * np + (tile0 + j) * 8 + g;
            scale[j] = scale_value(scales[meta]);
            bias[j] = zero_bias(zeros, meta);
        }
    };
    const int first_step = blockIdx.y * steps_per_split + warp;
    if (PREFETCH && first_step < step_end) load_step(first_step);
    for (int s = first_step; s < step_end; s += WARPS) {
        if (!PREFETCH) load_step(s);
        u32 h[TILES][16];
        u32 step_bias[TILES];
        float step_scale[TILES];
#pragma unroll
        for (int j = 0; j < TILES; ++j) decode_block(w[j], h[j]), step_bias[j] = bias[j], step_scale[j] = scale[j];
        if (PREFETCH && s + WARPS < step_end) load_step(s + WARPS);  // in flight during this step's math
#pragma unroll
        for (int v = 0; v < 4; ++v) {  // activations 8v .. 8v + 7 of the lane's 32: k16 slices 2v, 2v + 1
            const int k = s * 128 + 32 * t + 8 * v;
            uint4 lo[ROW_TILES], hi[ROW_TILES];  // rows 16i + g and 16i + g + 8
#pragma unroll
            for (int i = 0; i < ROW_TILES; ++i) {
                lo[i] = activations8(x, 16 * i + g, k, m, k_valid, ldx);
                hi[i] = ROWS > 8 ? activations8(x, 16 * i + g + 8, k, m, k_valid, ldx) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int kk = 2 * v + half;
#pragma unroll
                for (int j = 0; j < TILES; ++j) {
                    const auto ws = weight_scale(step_scale[j]);
                    const u32 b0 = dequantize_pair(h[j][2 * kk], step_bias[j], ws);
                    const u32 b1 = dequantize_pair(h[j][2 * kk + 1], step_bias[j], ws);
#pragma unroll
                    for (int i = 0; i < ROW_TILES; ++i) {
                        const u32 a[4] = {half ? lo[i].z : lo[i].x, half ? hi[i].z : hi[i].x,
                                          half ? lo[i].w : lo[i].y, half ? hi[i].w : hi[i].y};
                        mma(c[i][j], a, b0, b1);
                    }
                }
            }
        }
    }

    // Accumulator (i, j, e): row 16i + g (+8 for e >= 2), column 8 * (tile0 + j) + 2t (+1 for odd e).
    constexpr int VALUES = ROW_TILES * TILES * 4;
    auto store = [&](int v, float value) {
        const int e = v & 3, j = (v >> 2) % TILES, i = (v >> 2) / TILES;
        const int row = i * 16 + g + (e >> 1) * 8, col = (tile0 + j) * 8 + 2 * t + (e & 1);
        if (row >= m || col >= n) return;
        if (gridDim.y > 1) atomicAdd(partial + (long long)row * n + col, value);
        else y[(long long)row * n + col] = to_output(value);
    };
    if (WARPS == 1) {
#pragma unroll
        for (int v = 0; v < VALUES; ++v) store(v, c[v / 4 / TILES][(v / 4) % TILES][v & 3]);
        return;
    }
    QJIT_DYNAMIC_SHARED(float, partial_sums);  // [WARPS][VALUES][32]
#pragma unroll
    for (int v = 0; v < VALUES; ++v) partial_sums[(warp * VALUES + v) * 32 + lane] = c[v / 4 / TILES][(v / 4) % TILES][v & 3];
    __syncthreads();
    for (int v = warp; v < VALUES; v += WARPS) {
        float sum = 0.f;
#pragma unroll
        for (int other = 0; other < WARPS; ++other) sum += partial_sums[(other * VALUES + v) * 32 + lane];
        store(v, sum);
    }
}
)";
    return out_.str();
}

std::string SourceWriter::gemm() {
    const CudaTiling& t = spec_.tiling;
    const bool group_spans_tile = spec_.per_column() || spec_.format.group_size >= t.block_k;
    out_ << "// " << kernel_name(spec_) << ": y = x * W on tensor cores (mma.sync m16n8k16, fp32 accumulators)\n"
         << "// behind a " << t.stages << "-stage cp.async pipeline; codes are dequantized into shared memory per K step.\n"
         << kPrelude << kAsyncCopy;
    constants();
    out_ << "constexpr int BM = " << t.block_m << ", BN = " << t.block_n << ", BK = " << t.block_k << ";\n"
         << "constexpr int WARPS = " << t.warps << ", THREADS = WARPS * 32, STAGES = " << t.stages << ";\n"
         << "constexpr int GROUPS_PER_TILE = " << (group_spans_tile ? 1 : t.block_k / spec_.format.group_size) << ";\n";
    out_ << R"(constexpr int LDS = BK + 8;                        // halves per shared row (padding: conflict-free ldmatrix)
constexpr int WARP_N = BN / WARPS;                   // columns each warp multiplies
constexpr int M_TILES = BM / 16, N_TILES = WARP_N / 8;
constexpr int A_BYTES = BM * LDS * 2;
constexpr int CODE_BYTES_PER_COLUMN = BK * BITS / 8;
constexpr int CODE_BYTES = BN * CODE_BYTES_PER_COLUMN;
constexpr int SCALE_BYTES = GROUPS_PER_TILE * BN * (int)sizeof(scale_t);
constexpr int ZERO_BYTES = SYMMETRIC ? 0 : GROUPS_PER_TILE * BN * 2;
constexpr int STAGE_BYTES = (A_BYTES + CODE_BYTES + SCALE_BYTES + ZERO_BYTES + 15) / 16 * 16;
static_assert(A_BYTES % 16 == 0 && CODE_BYTES % 16 == 0 && SCALE_BYTES % 16 == 0 && ZERO_BYTES % 16 == 0, "alignment");
)";
    decode_block();
    dequantize_helpers();
    out_ << R"(
struct Stage {
    u16* a; unsigned char* codes; scale_t* scales; u16* zeros;
    __device__ explicit Stage(unsigned char* base)
        : a(reinterpret_cast<u16*>(base)), codes(base + A_BYTES),
          scales(reinterpret_cast<scale_t*>(base + A_BYTES + CODE_BYTES)),
          zeros(reinterpret_cast<u16*>(base + A_BYTES + CODE_BYTES + SCALE_BYTES)) {}
};

// Starts the copies of K tile `tile` into `stage`: activations (rows past m and K past k_valid
// zero-filled), the tile's codes, and the scales and zero points of the groups it covers.
static __device__ __forceinline__ void load_tile(Stage stage, int tile, const u16* x, const unsigned char* codes,
                                                 const scale_t* scales, const u16* zeros, int m, int m0, int n0,
                                                 int np, int k_valid, int ldx, long long column_bytes, int num_groups) {
    const int k0 = tile * BK;
    for (int i = threadIdx.x; i < BM * BK / 8; i += THREADS) {
        const int row = i / (BK / 8), k = k0 + i % (BK / 8) * 8;
        const bool valid = m0 + row < m && k < k_valid;
        copy_async_16(stage.a + row * LDS + (k - k0), valid ? x + (long long)(m0 + row) * ldx + k : x, valid);
    }
    constexpr int CODE_CHUNKS = CODE_BYTES_PER_COLUMN / 16;
    for (int i = threadIdx.x; i < BN * CODE_CHUNKS; i += THREADS) {
        const int col = i / CODE_CHUNKS, chunk = i % CODE_CHUNKS;
        copy_async_16(stage.codes + col * CODE_BYTES_PER_COLUMN + chunk * 16,
                      codes + (n0 + col) * column_bytes + (long long)k0 * BITS / 8 + chunk * 16, true);
    }
    constexpr int SCALE_CHUNKS = BN * (int)sizeof(scale_t) / 16;
    for (int i = threadIdx.x; i < GROUPS_PER_TILE * SCALE_CHUNKS; i += THREADS) {
        const int g = group_of(k0 + i / SCALE_CHUNKS * (GROUP == 0 ? 0 : GROUP), num_groups);
        const int chunk = i % SCALE_CHUNKS;
        copy_async_16(reinterpret_cast<unsigned char*>(stage.scales) + (i / SCALE_CHUNKS) * BN * sizeof(scale_t) + chunk * 16,
                      reinterpret_cast<const unsigned char*>(scales + (long long)g * np + n0) + chunk * 16, true);
    }
    if (!SYMMETRIC) {
        constexpr int ZERO_CHUNKS = BN * 2 / 16;
        for (int i = threadIdx.x; i < GROUPS_PER_TILE * ZERO_CHUNKS; i += THREADS) {
            const int g = group_of(k0 + i / ZERO_CHUNKS * (GROUP == 0 ? 0 : GROUP), num_groups);
            const int chunk = i % ZERO_CHUNKS;
            copy_async_16(reinterpret_cast<unsigned char*>(stage.zeros) + (i / ZERO_CHUNKS) * BN * 2 + chunk * 16,
                          reinterpret_cast<const unsigned char*>(zeros + (long long)g * np + n0) + chunk * 16, true);
        }
    }
}

// The stage's codes as BN x BK weights of the activation type in b[column][k].
static __device__ __forceinline__ void dequantize_tile(Stage stage, u16* b) {
    constexpr int BLOCKS = BK / 32;
    for (int i = threadIdx.x; i < BN * BLOCKS; i += THREADS) {
        const int col = i / BLOCKS, block = i % BLOCKS;
        const u32* w = reinterpret_cast<const u32*>(stage.codes + col * CODE_BYTES_PER_COLUMN) + block * BITS;
        u32 wl[BITS];
#pragma unroll
        for (int j = 0; j < BITS; ++j) wl[j] = w[j];
        u32 h[16];
        decode_block(wl, h);
        const int meta = (GROUPS_PER_TILE == 1 ? 0 : block * 32 / (GROUP == 0 ? 1 : GROUP)) * BN + col;
        const u32 bias = zero_bias(stage.zeros, meta);
        const float s = scale_value(stage.scales[meta]);
)";
    out_ << (f16() ? "        const u32 scale = scale_pair(s);\n" : "        const float scale = s;\n");
    out_ << R"(        uint4* dst = reinterpret_cast<uint4*>(b + col * LDS + block * 32);
#pragma unroll
        for (int v = 0; v < 4; ++v)
            dst[v] = make_uint4(dequantize_pair(h[4 * v], bias, scale), dequantize_pair(h[4 * v + 1], bias, scale),
                                dequantize_pair(h[4 * v + 2], bias, scale), dequantize_pair(h[4 * v + 3], bias, scale));
    }
}
)";
    mma_instruction();
    out_ << R"(
extern "C" __global__ void __launch_bounds__(THREADS) qjit_gemm(
    const u32* __restrict__ codes_raw, const void* __restrict__ scales_raw, const u16* __restrict__ zeros,
    const u16* __restrict__ x, u16* __restrict__ y, int m, int n, int np, int k_valid, int ldx, int kp,
    int num_groups, float* __restrict__ partial, int k_tiles_per_split) {
    QJIT_DYNAMIC_SHARED(unsigned char, shared);
    const unsigned char* codes = reinterpret_cast<const unsigned char*>(codes_raw);
    const scale_t* scales = static_cast<const scale_t*>(scales_raw);
    const long long column_bytes = (long long)kp * BITS / 8;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    const int tile_begin = blockIdx.z * k_tiles_per_split;
    const int tile_end = min(kp / BK, tile_begin + k_tiles_per_split);
    const int tiles = tile_end - tile_begin;
    u16* b = reinterpret_cast<u16*>(shared + STAGES * STAGE_BYTES);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float c[M_TILES][N_TILES][4];
#pragma unroll
    for (int i = 0; i < M_TILES; ++i)
#pragma unroll
        for (int j = 0; j < N_TILES; ++j) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.f;

    // One commit per stage and per iteration, empty or not, keeps wait_async's count exact.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles)
            load_tile(Stage(shared + s * STAGE_BYTES), tile_begin + s, x, codes, scales, zeros, m, m0, n0, np,
                      k_valid, ldx, column_bytes, num_groups);
        commit_async();
    }
    for (int i = 0; i < tiles; ++i) {
        wait_async<STAGES - 2>();
        __syncthreads();  // tile i has landed for every thread; every thread is done with tile i - 1
        const int ahead = i + STAGES - 1;
        if (ahead < tiles)
            load_tile(Stage(shared + ahead % STAGES * STAGE_BYTES), tile_begin + ahead, x, codes, scales, zeros, m,
                      m0, n0, np, k_valid, ldx, column_bytes, num_groups);
        commit_async();
        const Stage stage(shared + i % STAGES * STAGE_BYTES);
        dequantize_tile(stage, b);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            u32 a[M_TILES][4];
#pragma unroll
            for (int mi = 0; mi < M_TILES; ++mi)
                load_matrix_x4(a[mi], stage.a + (mi * 16 + (lane & 15)) * LDS + kk + (lane >> 4) * 8);
#pragma unroll
            for (int nj = 0; nj < N_TILES / 2; ++nj) {
                u32 bf[4];  // k 0-7 and 8-15 of columns 0-7, then of columns 8-15
                load_matrix_x4(bf, b + (warp * WARP_N + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk +
                                       ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int mi = 0; mi < M_TILES; ++mi) {
                    mma(c[mi][2 * nj], a[mi], bf[0], bf[1]);
                    mma(c[mi][2 * nj + 1], a[mi], bf[2], bf[3]);
                }
            }
        }
    }
    wait_async<0>();

    // Accumulator (mi, nj): rows mi*16 + lane/4 (+8), columns nj*8 + 2*(lane%4) (+1).
    const bool split = gridDim.z > 1;
#pragma unroll
    for (int mi = 0; mi < M_TILES; ++mi)
#pragma unroll
        for (int nj = 0; nj < N_TILES; ++nj)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = m0 + mi * 16 + (lane >> 2) + (e >> 1) * 8;
                const int col = n0 + warp * WARP_N + nj * 8 + (lane & 3) * 2 + (e & 1);
                if (row >= m || col >= n) continue;
                if (split) atomicAdd(partial + (long long)row * n + col, c[mi][nj][e]);
                else y[(long long)row * n + col] = to_output(c[mi][nj][e]);
            }
}
)";
    return out_.str();
}

}  // namespace

GeneratedKernel generate_kernel(const CudaKernelSpec& spec) {
    check_spec(spec);
    CudaKernelSpec source_spec = spec;
    source_spec.tiling.split_k = 1;  // a launch-time choice: one source for every split
    GeneratedKernel kernel;
    kernel.name = kernel_name(spec);
    SourceWriter writer(source_spec);
    if (needs_mixed_kernel(spec.format)) {
        kernel.entry = "qjit_mixed_gemv";
        kernel.source = writer.mixed_gemv();
    } else if (spec.tiling.kind == KernelKind::Gemv) {
        kernel.entry = "qjit_gemv";
        kernel.source = writer.gemv();
    } else if (spec.tiling.kind == KernelKind::Mma) {
        kernel.entry = "qjit_mma";
        kernel.source = writer.mma();
    } else {
        kernel.entry = "qjit_gemm";
        kernel.source = writer.gemm();
    }
    kernel.threads = unsigned(spec.tiling.warps * 32);
    kernel.shared_bytes = shared_memory_bytes(spec);
    return kernel;
}

std::string support_kernels_source() {
    return std::string(kPrelude) + R"(
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
)";
}

}  // namespace qjit::jit::cuda
