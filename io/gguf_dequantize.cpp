#include "io/gguf_dequantize.hpp"

#include <bit>
#include <limits>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/gguf_blocks.hpp"
#include "format/weight_format.hpp"

namespace qjit {

namespace {

// Where each field lies and how a code is unpacked: format/gguf_blocks.hpp (shared with the
// importer). The fp32 arithmetic below is ggml's, kept apart: it is the importer's oracle.
using namespace gguf_blocks;

void dequantize_f32(const uint8_t* block, float* out) { *out = std::bit_cast<float>(u32_at(block)); }
void dequantize_f16(const uint8_t* block, float* out) { *out = half_at(block); }
void dequantize_bf16(const uint8_t* block, float* out) { *out = bf16_to_float(u16_at(block)); }

// d (fp16), then 16 bytes of nibbles: d * (q - 8).
void dequantize_q4_0(const uint8_t* block, float* out) {
    const float d = half_at(block + Q4_0::d);
    for (int i = 0; i < 32; ++i) out[i] = d * float(nibble_code(block + Q4_0::qs, i) - 8);
}

// d, m (fp16), nibbles as Q4_0: d * q + m.
void dequantize_q4_1(const uint8_t* block, float* out) {
    const float d = half_at(block + Q4_1::d);
    const float m = half_at(block + Q4_1::m);
    for (int i = 0; i < 32; ++i) out[i] = d * float(nibble_code(block + Q4_1::qs, i)) + m;
}

// d (fp16), qh (4 bytes), 16 bytes of nibbles: d * (code - 16).
void dequantize_q5_0(const uint8_t* block, float* out) {
    const float d = half_at(block + Q5_0::d);
    const uint32_t qh = u32_at(block + Q5_0::qh);
    for (int i = 0; i < 32; ++i) out[i] = d * float(five_bit_code(block + Q5_0::qs, qh, i) - 16);
}

// d, m (fp16), qh, nibbles: d * code + m.
void dequantize_q5_1(const uint8_t* block, float* out) {
    const float d = half_at(block + Q5_1::d);
    const float m = half_at(block + Q5_1::m);
    const uint32_t qh = u32_at(block + Q5_1::qh);
    for (int i = 0; i < 32; ++i) out[i] = d * float(five_bit_code(block + Q5_1::qs, qh, i)) + m;
}

// d (fp16), 32 int8 codes: code * d.
void dequantize_q8_0(const uint8_t* block, float* out) {
    const float d = half_at(block + Q8_0::d);
    for (int i = 0; i < 32; ++i) out[i] = float(int8_t(block[Q8_0::qs + i])) * d;
}

// 16 scale bytes (scale and min per 16 values), 64 bytes of 2-bit codes, d, dmin (fp16):
// (d * sc) * q - (dmin * min).
void dequantize_q2_k(const uint8_t* block, float* out) {
    const float d = half_at(block + Q2_K::d);
    const float dmin = half_at(block + Q2_K::dmin);
    for (int i = 0; i < kSuperBlock; ++i) {
        const float dl = d * float(q2_k_scale(block + Q2_K::scales, i / 16));
        const float ml = dmin * float(q2_k_min(block + Q2_K::scales, i / 16));
        out[i] = dl * float(two_bit_code(block + Q2_K::qs, i)) - ml;
    }
}

// hmask (32 bytes), 2-bit codes (64 bytes), scales (12 bytes), d (fp16): (d * scale) * q, where q
// is the 2-bit code less 4 when value i's hmask bit is clear.
void dequantize_q3_k(const uint8_t* block, float* out) {
    const float d = half_at(block + Q3_K::d);
    for (int i = 0; i < kSuperBlock; ++i) {
        const float dl = d * float(q3_k_scale(block + Q3_K::scales, i / 16));
        const int high_clear = high_bit(block + Q3_K::hmask, i) ^ 1;
        out[i] = dl * float(two_bit_code(block + Q3_K::qs, i) - 4 * high_clear);
    }
}

// d, dmin (fp16), scales (12 bytes), and for Q5_K qh (32 bytes of fifth bits), then 128 bytes of
// nibbles: (d * sc) * q - (dmin * min) per 32 values.
template <bool FifthBit>
void dequantize_q4_q5_k(const uint8_t* block, float* out) {
    static_assert(Q4_K::d == Q5_K::d && Q4_K::dmin == Q5_K::dmin && Q4_K::scales == Q5_K::scales);
    const float d = half_at(block + Q4_K::d);
    const float dmin = half_at(block + Q4_K::dmin);
    const uint8_t* qs = block + (FifthBit ? Q5_K::qs : Q4_K::qs);
    for (int j = 0; j < 8; ++j) {
        int scale = 0, min = 0;
        k4_scale_min(block + Q4_K::scales, j, &scale, &min);
        const float dl = d * float(scale);
        const float ml = dmin * float(min);
        for (int l = 0; l < 32; ++l) {
            const int i = 32 * j + l;
            const int q = k4_nibble(qs, i) | (FifthBit ? high_bit(block + Q5_K::qh, i) << 4 : 0);
            out[i] = dl * float(q) - ml;
        }
    }
}

// ql (128 bytes of nibbles), qh (64 bytes of 2-bit fields), 16 int8 scales, d (fp16):
// (d * scale) * (code - 32).
// d (fp16), nibbles as Q4_0 that index ggml's IQ4_NL levels: d * level.
void dequantize_iq4_nl(const uint8_t* block, float* out) {
    const float d = half_at(block + IQ4_NL::d);
    for (int i = 0; i < 32; ++i) out[i] = d * float(kIq4NlLevels[nibble_code(block + IQ4_NL::qs, i)]);
}

// d (fp16), 6-bit sub-block scales less 32, IQ4_NL levels: (d * scale) * level per 32 values.
void dequantize_iq4_xs(const uint8_t* block, float* out) {
    const float d = half_at(block + IQ4_XS::d);
    for (int i = 0; i < kSuperBlock; ++i) {
        const float dl = d * float(iq4_xs_scale(block, i / 32));
        out[i] = dl * float(kIq4NlLevels[iq4_xs_code(block, i)]);
    }
}

void dequantize_q6_k(const uint8_t* block, float* out) {
    const float d = half_at(block + Q6_K::d);
    for (int i = 0; i < kSuperBlock; ++i) {
        const float dl = d * float(q6_k_scale(block + Q6_K::scales, i / 16));
        out[i] = dl * float(q6_k_code(block + Q6_K::ql, block + Q6_K::qh, i) - 32);
    }
}

using BlockDequantizer = void (*)(const uint8_t* block, float* out);

BlockDequantizer dequantizer_of(GgmlType type) {
    switch (type) {
        case GgmlType::F32: return dequantize_f32;
        case GgmlType::F16: return dequantize_f16;
        case GgmlType::BF16: return dequantize_bf16;
        case GgmlType::Q4_0: return dequantize_q4_0;
        case GgmlType::Q4_1: return dequantize_q4_1;
        case GgmlType::Q5_0: return dequantize_q5_0;
        case GgmlType::Q5_1: return dequantize_q5_1;
        case GgmlType::Q8_0: return dequantize_q8_0;
        case GgmlType::Q2_K: return dequantize_q2_k;
        case GgmlType::Q3_K: return dequantize_q3_k;
        case GgmlType::Q4_K: return dequantize_q4_q5_k<false>;
        case GgmlType::Q5_K: return dequantize_q4_q5_k<true>;
        case GgmlType::Q6_K: return dequantize_q6_k;
        case GgmlType::IQ4_NL: return dequantize_iq4_nl;
        case GgmlType::IQ4_XS: return dequantize_iq4_xs;
        default: return nullptr;
    }
}

BlockDequantizer require_dequantizer(GgmlType type) {
    const BlockDequantizer dequantizer = dequantizer_of(type);
    if (dequantizer == nullptr)
        fail(QJIT_ERROR_UNSUPPORTED, "dequantizing ggml ", ggml_type_name(type),
             " tensors is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL and IQ4_XS are)");
    return dequantizer;
}

GgmlBlock block_of(GgmlType type) {
    GgmlBlock block;
    ggml_block_of(type, &block);  // every type with a dequantizer has a block
    return block;
}

void dequantize_blocks(BlockDequantizer dequantizer, GgmlBlock block, const uint8_t* row, int64_t k, float* out) {
    for (int64_t b = 0; b < k / block.values; ++b) dequantizer(row + b * block.bytes, out + b * block.values);
}

}  // namespace

bool gguf_dequantize_supported(GgmlType type) { return dequantizer_of(type) != nullptr; }

void dequantize_gguf_row(GgmlType type, const uint8_t* row, int64_t k, float* out) {
    const BlockDequantizer dequantizer = require_dequantizer(type);
    const GgmlBlock block = block_of(type);
    require(k >= 0 && k % block.values == 0, "dequantize_gguf_row: k = ", k, " is not a whole number of ",
            ggml_type_name(type), " blocks (", block.values, " values each)");
    dequantize_blocks(dequantizer, block, row, k, out);
}

std::vector<float> dequantize_gguf(const GgufTensor& tensor) {
    const BlockDequantizer dequantizer = require_dequantizer(tensor.type);
    const GgmlBlock block = block_of(tensor.type);
    require(!tensor.dims.empty() && tensor.dims[0] > 0 && tensor.dims[0] % block.values == 0,
            "dequantize_gguf: tensor '", tensor.name, "' has no first dimension that is a whole number of ",
            ggml_type_name(tensor.type), " blocks");
    const int64_t k = tensor.dims[0];
    int64_t rows = 1;
    for (size_t i = 1; i < tensor.dims.size(); ++i) {
        require(tensor.dims[i] > 0 && tensor.dims[i] <= std::numeric_limits<int64_t>::max() / rows,
                "dequantize_gguf: tensor '", tensor.name, "' has a dimension that is not positive or overflows");
        rows *= tensor.dims[i];
    }
    const size_t row_bytes = size_t(k / block.values * block.bytes);
    require(tensor.bytes / row_bytes == size_t(rows) && tensor.bytes % row_bytes == 0,
            "dequantize_gguf: tensor '", tensor.name, "' holds ", tensor.bytes, " bytes, not ", rows, " rows of ",
            row_bytes);
    std::vector<float> values(size_t(rows) * size_t(k));
    for (int64_t r = 0; r < rows; ++r)
        dequantize_blocks(dequantizer, block, tensor.data + r * row_bytes, k, values.data() + r * k);
    return values;
}

}  // namespace qjit
