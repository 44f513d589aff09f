#include "format/gguf_dequantize.hpp"

#include <bit>
#include <limits>

#include "base/error.hpp"
#include "base/half.hpp"

namespace qjit {

namespace {

// Block layouts are ggml-common.h's structs; the bit arithmetic follows gguf-py's quants.py, whose
// comments and reshapes give each value's bits.

constexpr int kSuperBlock = 256;  // QK_K

uint16_t u16_at(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t u32_at(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
float half_at(const uint8_t* p) { return half_to_float(u16_at(p)); }

void dequantize_f32(const uint8_t* block, float* out) { *out = std::bit_cast<float>(u32_at(block)); }
void dequantize_f16(const uint8_t* block, float* out) { *out = half_at(block); }
void dequantize_bf16(const uint8_t* block, float* out) { *out = bf16_to_float(u16_at(block)); }

// d (fp16), then 16 bytes: value j in the low nibble of byte j, value 16 + j in its high nibble.
void dequantize_q4_0(const uint8_t* block, float* out) {
    const float d = half_at(block);
    const uint8_t* qs = block + 2;
    for (int j = 0; j < 16; ++j) {
        out[j] = d * float(int(qs[j] & 15) - 8);
        out[j + 16] = d * float(int(qs[j] >> 4) - 8);
    }
}

// d, m (fp16), nibbles as Q4_0: d * q + m.
void dequantize_q4_1(const uint8_t* block, float* out) {
    const float d = half_at(block);
    const float m = half_at(block + 2);
    const uint8_t* qs = block + 4;
    for (int j = 0; j < 16; ++j) {
        out[j] = d * float(qs[j] & 15) + m;
        out[j + 16] = d * float(qs[j] >> 4) + m;
    }
}

// The 5-bit code of value i: its nibble (as Q4_0) and bit i of the little-endian uint32 qh.
int five_bit_code(const uint8_t* qs, uint32_t qh, int i) {
    const int nibble = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
    return nibble | int(qh >> i & 1) << 4;
}

// d (fp16), qh (4 bytes), 16 bytes of nibbles: d * (code - 16).
void dequantize_q5_0(const uint8_t* block, float* out) {
    const float d = half_at(block);
    const uint32_t qh = u32_at(block + 2);
    for (int i = 0; i < 32; ++i) out[i] = d * float(five_bit_code(block + 6, qh, i) - 16);
}

// d, m (fp16), qh, nibbles: d * code + m.
void dequantize_q5_1(const uint8_t* block, float* out) {
    const float d = half_at(block);
    const float m = half_at(block + 2);
    const uint32_t qh = u32_at(block + 4);
    for (int i = 0; i < 32; ++i) out[i] = d * float(five_bit_code(block + 8, qh, i)) + m;
}

// d (fp16), 32 int8 codes: code * d.
void dequantize_q8_0(const uint8_t* block, float* out) {
    const float d = half_at(block);
    for (int i = 0; i < 32; ++i) out[i] = float(int8_t(block[2 + i])) * d;
}

// The 2-bit field of value i (of 256) in 64 bytes: byte 32 * (i / 128) + i % 32, bits 2 * ((i % 128) / 32).
int two_bit_code(const uint8_t* qs, int i) { return qs[i / 128 * 32 + i % 32] >> (2 * (i % 128 / 32)) & 3; }

// 16 scale bytes (low nibble scale, high nibble min, per 16 values), 64 bytes of 2-bit codes,
// d, dmin (fp16): (d * sc) * q - (dmin * min).
void dequantize_q2_k(const uint8_t* block, float* out) {
    const uint8_t* scales = block;
    const uint8_t* qs = block + 16;
    const float d = half_at(block + 80);
    const float dmin = half_at(block + 82);
    for (int i = 0; i < kSuperBlock; ++i) {
        const uint8_t scale = scales[i / 16];
        const float dl = d * float(scale & 15);
        const float ml = dmin * float(scale >> 4);
        out[i] = dl * float(two_bit_code(qs, i)) - ml;
    }
}

// The 6-bit scale of sub-block s (of 16), packed in 12 bytes: low nibbles in bytes 0..7 (s < 8
// low, else high nibble of byte s - 8), the top two bits in bytes 8..11 (byte 8 + s % 4, bits
// 2 * (s / 4)); the scale is the code - 32.
int q3_k_scale(const uint8_t* scales, int s) {
    const int low = s < 8 ? scales[s] & 15 : scales[s - 8] >> 4;
    const int high = scales[8 + s % 4] >> (2 * (s / 4)) & 3;
    return (low | high << 4) - 32;
}

// hmask (32 bytes), 2-bit codes (64 bytes), scales (12 bytes), d (fp16): (d * scale) * q, where q
// is the 2-bit code less 4 when value i's hmask bit (bit i / 32 of byte i % 32) is clear.
void dequantize_q3_k(const uint8_t* block, float* out) {
    const uint8_t* hmask = block;
    const uint8_t* qs = block + 32;
    const uint8_t* scales = block + 96;
    const float d = half_at(block + 108);
    for (int i = 0; i < kSuperBlock; ++i) {
        const float dl = d * float(q3_k_scale(scales, i / 16));
        const int high_clear = (hmask[i % 32] >> (i / 32) & 1) ^ 1;
        out[i] = dl * float(two_bit_code(qs, i) - 4 * high_clear);
    }
}

// The 6-bit scale and min of sub-block j (of 8) in Q4_K's and Q5_K's 12 scale bytes (ggml's
// get_scale_min_k4): for j < 4 the low six bits of bytes j and j + 4; for j >= 4 the nibbles of
// byte j + 4 with the top two bits of bytes j - 4 and j.
void k4_scale_min(const uint8_t* scales, int j, int* scale, int* min) {
    if (j < 4) {
        *scale = scales[j] & 63;
        *min = scales[j + 4] & 63;
    } else {
        *scale = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4;
        *min = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
    }
}

// The nibble of value i (of 256) in Q4_K's and Q5_K's 128 bytes: sub-block j = i / 32 uses the low
// nibbles (j even) or high nibbles (j odd) of bytes 32 * (j / 2) ..+32.
int k4_nibble(const uint8_t* qs, int i) {
    const int j = i / 32;
    return qs[j / 2 * 32 + i % 32] >> (4 * (j % 2)) & 15;
}

// d, dmin (fp16), scales (12 bytes), and for Q5_K qh (32 bytes: bit j of byte i % 32 is value i's
// fifth bit), then 128 bytes of nibbles: (d * sc) * q - (dmin * min) per 32 values.
template <bool FifthBit>
void dequantize_q4_q5_k(const uint8_t* block, float* out) {
    const float d = half_at(block);
    const float dmin = half_at(block + 2);
    const uint8_t* scales = block + 4;
    const uint8_t* qh = block + 16;
    const uint8_t* qs = FifthBit ? block + 48 : block + 16;
    for (int j = 0; j < 8; ++j) {
        int scale = 0, min = 0;
        k4_scale_min(scales, j, &scale, &min);
        const float dl = d * float(scale);
        const float ml = dmin * float(min);
        for (int l = 0; l < 32; ++l) {
            const int i = 32 * j + l;
            const int q = k4_nibble(qs, i) | (FifthBit ? (qh[l] >> j & 1) << 4 : 0);
            out[i] = dl * float(q) - ml;
        }
    }
}

// ql (128 bytes of nibbles), qh (64 bytes of 2-bit fields), 16 int8 scales, d (fp16): per half of
// 128 values, value f takes the nibble of ql byte f % 64 (low for f < 64) and the bits 2 * (f / 32)
// of qh byte f % 32; (d * scale) * (code - 32).
void dequantize_q6_k(const uint8_t* block, float* out) {
    const uint8_t* ql = block;
    const uint8_t* qh = block + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
    const float d = half_at(block + 208);
    for (int i = 0; i < kSuperBlock; ++i) {
        const int half = i / 128, f = i % 128;
        const int low = ql[64 * half + f % 64] >> (4 * (f / 64)) & 15;
        const int high = qh[32 * half + f % 32] >> (2 * (f / 32)) & 3;
        const float dl = d * float(scales[i / 16]);
        out[i] = dl * float((low | high << 4) - 32);
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
        default: return nullptr;
    }
}

BlockDequantizer require_dequantizer(GgmlType type) {
    const BlockDequantizer dequantizer = dequantizer_of(type);
    if (dequantizer == nullptr)
        fail(QJIT_ERROR_UNSUPPORTED, "dequantizing ggml ", ggml_type_name(type),
             " tensors is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K to Q6_K are)");
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
