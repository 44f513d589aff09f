#include "jit/cuda/cuda_source_writer.hpp"

#include "format/cuda_code_layout.hpp"

namespace qjit::jit::cuda {

using namespace cuda_layout;

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

// A group's scale and offset from a metadata array with rows of `stride` columns: global memory
// ([num_groups][np]) or a GEMM stage's copy ([GROUPS_PER_TILE][BN]).
const char* const kMetadataValues = R"(// Group g, column c of a metadata array of rows of `stride` values: scale_t values [groups][stride],
// or super-block codes: fp16 d (dmin) [super_rows][stride], then byte codes [groups][stride] (signed
// scale codes, unsigned min codes), the group's d in row `super_row`. d * code is exact in fp32.
static __device__ __forceinline__ float metadata_value(const void* array, int g, int c, int stride, int super_rows,
                                                       int super_row, bool min_code) {
    if (!SUPER_BLOCK) return scale_value(static_cast<const scale_t*>(array)[g * stride + c]);
    const u16* d = static_cast<const u16*>(array);
    const unsigned char* code = reinterpret_cast<const unsigned char*>(d + super_rows * stride) + g * stride + c;
    const float dv = half_to_float(d[super_row * stride + c]);
    return min_code ? -(dv * float(*code)) : dv * float(*reinterpret_cast<const signed char*>(code));
}
static __device__ __forceinline__ float group_scale(const void* scales, int g, int c, int stride, int super_rows,
                                                    int super_row) {
    return metadata_value(scales, g, c, stride, super_rows, super_row, false);
}
// The group's float offset (0 without float offsets).
static __device__ __forceinline__ float group_offset(const void* zeros, int g, int c, int stride, int super_rows,
                                                     int super_row) {
    return FLOAT_OFFSETS ? metadata_value(zeros, g, c, stride, super_rows, super_row, true) : 0.f;
}
)";

// Format constants shared by both kernels.
void CudaSourceWriter::constants() {
    out_ << "constexpr int BITS = " << spec_.format.bits << ";\n"
         << "constexpr int GROUP = " << (spec_.per_column() ? 0 : spec_.format.group_size) << ";  // 0: one group per column\n"
         << "constexpr bool SYMMETRIC = " << (spec_.format.symmetric ? "true" : "false") << ";\n"
         << "typedef " << (spec_.format.f16_scales() ? "u16" : "float") << " scale_t;\n"
         << "constexpr bool FLOAT_OFFSETS = " << (spec_.format.float_offsets ? "true" : "false")
         << ";  // W = scale * code + offset per group, no zero point\n"
         << "typedef " << (spec_.format.float_offsets ? "scale_t" : "u16")
         << " zero_t;  // the zero-point array: integer zero points, or float offsets at the scales' type\n"
         << "constexpr bool SUPER_BLOCK = " << (spec_.format.super_block_scales() ? "true" : "false")
         << ";  // scale = d * code (and offset = -(dmin * code)) per group\n"
         << "constexpr int GROUPS_PER_SUPER = "
         << (spec_.format.super_block_scales() ? kSuperBlockRows / spec_.format.group_size : 1) << ";\n"
         << "constexpr u32 SYMMETRIC_BIAS = " << (0x6400 + (1 << (spec_.format.bits - 1))) << "u;  // fp16 bits of 1024 + 2^(bits-1)\n"
         << "static __device__ __forceinline__ int group_of(int k, int num_groups) {\n"
         << "    return GROUP == 0 ? 0 : min(k / (GROUP == 0 ? 1 : GROUP), num_groups - 1);\n}\n"
         << "static __device__ __forceinline__ float scale_value(scale_t s) { return "
         << (spec_.format.f16_scales() ? "half_to_float(s)" : "s") << "; }\n"
         << kMetadataValues;
}

// name(w, h): the 16 pairs of a 32-code block of `bits` as fp16 pairs (1024 + code), per
// cuda_code_layout.hpp: one shift and one lop3 per regular pair and per piece of a spare pair.
void CudaSourceWriter::decode_block(int bits, const std::string& name) {
    auto both_halves = [](uint32_t mask) { return mask | mask << 16; };
    auto shifted = [](int word, int right) {
        std::string text = "w[" + std::to_string(word) + "]";
        if (right > 0) text += " >> " + std::to_string(right);
        if (right < 0) text += " << " + std::to_string(-right);
        return text;
    };
    out_ << "static __device__ __forceinline__ void " << name << "(const u32* w, u32 (&h)[16]) {\n";
    for (int p = 0; p < regular_pairs(bits); ++p)
        out_ << "    h[" << std::dec << p << "] = and_or(" << shifted(pair_word(bits, p), pair_shift(bits, p))
             << ", 0x" << std::hex << both_halves((1u << bits) - 1) << "u, 0x64006400u);\n";
    for (int p = regular_pairs(bits); p < kPairsPerBlock; ++p) {
        const SparePieces pieces = spare_pieces(bits, p);
        for (int i = 0; i < pieces.count; ++i) {
            const SparePiece& piece = pieces.piece[i];
            out_ << "    h[" << std::dec << p << "] = and_or(" << shifted(piece.word, piece.from - piece.to) << ", 0x"
                 << std::hex << both_halves(((1u << piece.length) - 1) << piece.to) << "u, "
                 << (i == 0 ? std::string("0x64006400u") : "h[" + std::to_string(p) + "]") << ");\n";
        }
    }
    out_ << std::dec << "}\n";
}

// Pair dequantization: the exact integers code - zero (fp16 arithmetic on numbers below 2048
// is exact; zero 0 with float offsets), times the scale in fp16 (as an fp16 model's weight) or
// fp32 (bf16 path), plus the float offset in the same operation.
void CudaSourceWriter::dequantize_helpers() {
    out_ << R"(static __device__ __forceinline__ u32 zero_bias(const void* zeros, int index) {
    const u32 bias = FLOAT_OFFSETS ? 0x6400u : SYMMETRIC ? SYMMETRIC_BIAS : 0x6400u + static_cast<const u16*>(zeros)[index];
    return bias | bias << 16;
}
)";
    if (f16())
        out_ << R"(// Two fp16 weights (code - zero) * scale, or code * scale + offset, from a decoded pair.
static __device__ __forceinline__ u32 dequantize_pair(u32 h, u32 bias, u32 scale2, u32 offset2) {
    const u32 d = hsub2(h, bias);
    return FLOAT_OFFSETS ? hfma2(d, scale2, offset2) : hmul2(d, scale2);
}
static __device__ __forceinline__ u32 scale_pair(float s) { const u32 h = float_to_f16(s); return h | h << 16; }
static __device__ __forceinline__ u32 offset_pair(float o) { return FLOAT_OFFSETS ? scale_pair(o) : 0u; }
static __device__ __forceinline__ u16 to_output(float v) { return float_to_f16(v); }
static __device__ __forceinline__ float activation_value(u16 v) { return half_to_float(v); }
)";
    else
        out_ << R"(// Two bf16 weights (code - zero) * scale, or code * scale + offset, from a decoded pair.
static __device__ __forceinline__ u32 dequantize_pair(u32 h, u32 bias, float scale, float offset) {
    const u32 d = hsub2(h, bias);
    return FLOAT_OFFSETS ? pack_bf16(fmaf(lo_f16(d), scale, offset), fmaf(hi_f16(d), scale, offset))
                         : pack_bf16(lo_f16(d) * scale, hi_f16(d) * scale);
}
static __device__ __forceinline__ float offset_pair(float o) { return o; }
static __device__ __forceinline__ u16 to_output(float v) { return float_to_bf16(v); }
static __device__ __forceinline__ float activation_value(u16 v) { return __uint_as_float(u32(v) << 16); }
)";
}

// block_activations(x, r, k, k_valid, ldx, xs): x[r][k .. k + 31] as 16 pairs, zero from k_valid on.
void CudaSourceWriter::block_activations() {
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

// name(w, bias, scale, offset, x): the sum over a 32-code block (decoded by `decoder`) of x * w.
// fp16: fp16 products, two fp16 partial sums of 16 terms, an fp32 total; bf16: the exact
// (code - zero) times x in fp32, scaled once, plus offset * sum(x) with float offsets.
void CudaSourceWriter::block_dot(const std::string& name, const std::string& decoder) {
    out_ << "static __device__ __forceinline__ float " << name
         << "(const u32* w, u32 bias, float scale, float offset, const u32 (&x)[16]) {\n"
         << "    u32 h[16];\n"
         << "    " << decoder << "(w, h);\n";
    if (f16())
        out_ << R"(    const u32 scale2 = scale_pair(scale), offset2 = offset_pair(offset);
    u32 sum0 = 0, sum1 = 0;
#pragma unroll
    for (int p = 0; p < 8; ++p) {
        sum0 = hfma2(dequantize_pair(h[p], bias, scale2, offset2), x[p], sum0);
        sum1 = hfma2(dequantize_pair(h[p + 8], bias, scale2, offset2), x[p + 8], sum1);
    }
    return (lo_f16(sum0) + hi_f16(sum0)) + (lo_f16(sum1) + hi_f16(sum1));
}
)";
    else
        out_ << R"(    float sum = 0.f, x_sum = 0.f;
#pragma unroll
    for (int p = 0; p < 16; ++p) {
        const u32 d = hsub2(h[p], bias);
        sum = fmaf(lo_f16(d), lo_bf16(x[p]), sum);
        sum = fmaf(hi_f16(d), hi_bf16(x[p]), sum);
        if (FLOAT_OFFSETS) x_sum += lo_bf16(x[p]) + hi_bf16(x[p]);
    }
    return FLOAT_OFFSETS ? fmaf(sum, scale, offset * x_sum) : sum * scale;
}
)";
}

// mma(c, a, b0, b1): c += A (16x16, row) * B (16x8, col) in fp32, operands of the activation type.
void CudaSourceWriter::mma_instruction() {
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

}  // namespace qjit::jit::cuda
